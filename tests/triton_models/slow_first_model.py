"""Plain test model: Y = X, but the request with X == 1 (the first of tests' sequences) takes 0.5 s.

Test scaffolding, not part of the product (tests/component/test_ensemble_pitfalls.py):
with two instances, the
requests sent after the first one finish before it, as a slow first chunk does in real streams.
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().astype(np.float32)
            if float(x.reshape(-1)[0]) == 1.0:
                time.sleep(0.5)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
