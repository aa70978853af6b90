"""Test scaffolding, not part of the product: a Python-backend model declared with an implicit state.
TOTAL = INPUT_STATE + VALUE, also written to OUTPUT_STATE for the next request of the sequence; an
INPUT_STATE that does not arrive reads as -1000, so a client can tell a missing state from a zero one."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "INPUT_STATE")
            before = (
                state.as_numpy() if state is not None else np.full(value.shape, -1000.0, dtype=np.float32)
            )
            total = (before + value).astype(np.float32)
            outputs = [pb_utils.Tensor("TOTAL", total), pb_utils.Tensor("OUTPUT_STATE", total)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
