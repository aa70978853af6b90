"""Head C: OUTPUT_C = sum of FEATS_IN_C over its 4 features (FP32 [4] -> FP32 [1])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "FEATS_IN_C").as_numpy()
            out = x.sum(axis=-1, keepdims=True).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT_C", out)]))
        return responses
