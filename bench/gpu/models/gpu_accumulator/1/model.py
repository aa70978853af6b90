"""GPU check: a sequence-batched accumulator whose per-sequence state lives on the GPU.

TOTAL = running sum of VALUE within one sequence (START resets it, END forgets it), keyed by the
correlation ID that Triton's sequence batcher fills in. VALUE must arrive on the GPU (gpu_scale makes it
there); a host-memory VALUE fails the request.
"""

import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


def _flag(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE")
            if value.is_cpu():
                error = pb_utils.TritonError(
                    "gpu_accumulator: VALUE arrived in host memory, expected the GPU"
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            x = torch.from_dlpack(value.to_dlpack())
            key = _flag(request, "CORRID")
            if _flag(request, "START") or key not in self.totals:
                self.totals[key] = torch.zeros_like(x)
            total = (self.totals[key] + x).contiguous()
            self.totals[key] = total
            if _flag(request, "END"):
                self.totals.pop(key, None)
            out = pb_utils.Tensor.from_dlpack("TOTAL", torch.utils.dlpack.to_dlpack(total))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
