"""Decoupled test model: answers each request with two responses, Y = X + 1 then Y = X + 2.

Test scaffolding, not part of the product (tests/component/test_ensemble_pitfalls.py):
the smallest decoupled step
with more than one response per request, the case Triton's ensembles cannot keep a sequence whole behind.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().astype(np.float32)
            sender = request.get_response_sender()
            for step in (1, 2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + np.float32(step))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
