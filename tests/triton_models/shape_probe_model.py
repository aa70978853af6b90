"""Test scaffolding, not part of the product: a batching Python-backend model that reports the shape it
received. Output RANK (INT32, one value per batch item) is the rank of input IN as the model got it (after
Triton's `reshape`); output SCORES (FP32 [3] per item) is (v, 2v, 0) for each item's first value v.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            batch = x.shape[0]
            v = x.reshape(batch, -1)[:, 0].astype(np.float32)
            rank = np.full((batch, 1), x.ndim, dtype=np.int32)
            scores = np.stack([v, 2 * v, np.zeros_like(v)], axis=1)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("RANK", rank), pb_utils.Tensor("SCORES", scores)])
            )
        return responses
