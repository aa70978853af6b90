"""Dequantize: VALUE = 0.5 * CODES (INT32 [1] -> FP32 [1])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            codes = pb_utils.get_input_tensor_by_name(request, "CODES").as_numpy()
            out = (codes.astype(np.float32) * 0.5).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("VALUE", out)]))
        return responses
