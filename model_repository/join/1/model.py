"""Join: JOINED = LEFT - RIGHT, broadcasting RIGHT (FP32 [4], FP32 [1] -> FP32 [4])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            left = pb_utils.get_input_tensor_by_name(request, "LEFT").as_numpy()
            right = pb_utils.get_input_tensor_by_name(request, "RIGHT").as_numpy()
            out = (left - right).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("JOINED", out)]))
        return responses
