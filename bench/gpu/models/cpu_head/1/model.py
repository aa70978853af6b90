"""GPU check, positive control: the same SUMS as gpu_head on a CPU instance with host-memory inputs
(Triton's default FORCE_CPU_ONLY_INPUT_TENSORS), so Triton must copy FEATS from the GPU to the host."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            feats = pb_utils.get_input_tensor_by_name(request, "FEATS_IN")
            if not feats.is_cpu():
                error = pb_utils.TritonError("cpu_head: FEATS_IN arrived on the GPU, expected host memory")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            x = feats.as_numpy()
            sums = x.reshape(x.shape[0], -1, 4).sum(axis=1, dtype=np.float64).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUMS", sums)]))
        return responses
