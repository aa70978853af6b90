"""Plain test model: Y = X, but a request whose X holds a negative value is refused (INVALID_ARG, the
client's fault) with the message "refusing a negative X".

Test scaffolding, not part of the product (tests/component/test_conditions_types.py): a branch's error
reaches the client through what evaluates the conditions, its message and its code kept.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("refusing a negative X", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
