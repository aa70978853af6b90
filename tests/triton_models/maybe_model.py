"""Decoupled test model: Y = X in one response when X > 0; no response at all otherwise (only the final flag).

Test scaffolding, not part of the product (tests/component/test_ensemble_pitfalls.py):
a decoupled step may answer a
request zero times; the pipeline must then answer it zero times too, and go on with the next requests.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            if float(x.reshape(-1)[0]) > 0:
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
