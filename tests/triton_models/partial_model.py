"""Test model that leaves a declared output unwritten: Y = X, and Z (declared) is never sent.

Test scaffolding, not part of the product (tests/component/test_ensemble_pitfalls.py):
a user model with a bug the
compiler cannot see; a client of the pipeline must get an error naming who missed the tensor, not a hang.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
