"""GPU check: FEATS[b, 4k + j] = SEED[b, j] * w[k], w = linspace(1, 2, 65536), made on the GPU by torch.

The output leaves through DLPack as a CUDA tensor, so Triton receives it in GPU memory.
"""

import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils

ROWS = 65536


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))
        self.weights = torch.linspace(1.0, 2.0, ROWS, dtype=torch.float32, device=self.device)

    def execute(self, requests):
        responses = []
        for request in requests:
            seed = pb_utils.get_input_tensor_by_name(request, "SEED")
            x = torch.from_dlpack(seed.to_dlpack()).to(self.device)  # [B, 4], from the client: host memory
            feats = (self.weights[None, :, None] * x[:, None, :]).reshape(x.shape[0], ROWS * 4).contiguous()
            out = pb_utils.Tensor.from_dlpack("FEATS", torch.utils.dlpack.to_dlpack(feats))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
