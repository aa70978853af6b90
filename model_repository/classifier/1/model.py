"""Classifier: LABEL = 1 when the features of X sum above 0, else 0 (FP32 [4] -> INT32 [1])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            label = (x.sum(axis=-1, keepdims=True) > 0).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("LABEL", label)]))
        return responses
