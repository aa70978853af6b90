"""Feature extractor: FEATS_A = 2 * INPUT_A + 1 (FP32 [4])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT_A").as_numpy()
            feats = (2.0 * x + 1.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FEATS_A", feats)]))
        return responses
