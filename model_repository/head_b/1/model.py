"""Head B: OUTPUT_B = 3 * FEATS_IN_B - 2 (FP32 [4])."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "FEATS_IN_B").as_numpy()
            out = (3.0 * x - 2.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT_B", out)]))
        return responses
