"""GPU check: VALUE = 2 * CHUNK, computed on the GPU and handed on as a CUDA tensor."""

import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            chunk = pb_utils.get_input_tensor_by_name(request, "CHUNK")
            value = (2.0 * torch.from_dlpack(chunk.to_dlpack()).to(self.device)).contiguous()
            out = pb_utils.Tensor.from_dlpack("VALUE", torch.utils.dlpack.to_dlpack(value))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
