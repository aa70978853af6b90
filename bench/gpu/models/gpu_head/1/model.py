"""GPU check: SUMS[b, j] = sum_k FEATS_IN[b, 4k + j], computed on the GPU.

It refuses (fails the request) an input that Triton handed over in host memory: on the router and
the shared fan-out path FEATS must arrive on the GPU.
"""

import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            feats = pb_utils.get_input_tensor_by_name(request, "FEATS_IN")
            if feats.is_cpu():
                error = pb_utils.TritonError("gpu_head: FEATS_IN arrived in host memory, expected the GPU")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            x = torch.from_dlpack(feats.to_dlpack())
            sums = x.reshape(x.shape[0], -1, 4).sum(dim=1).contiguous()
            assert sums.is_cuda
            out = pb_utils.Tensor.from_dlpack("SUMS", torch.utils.dlpack.to_dlpack(sums))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
