"""Stateful accumulator: TOTAL = running sum of VALUE within one sequence.

Sequence-batched (direct strategy). Triton's sequence batcher fills the control tensors START, END
and CORRID; START resets the sum, END forgets the sequence. State is kept per correlation ID, so
interleaved sequences stay independent as long as each sequence reaches the same instance.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            end = pb_utils.get_input_tensor_by_name(request, "END").as_numpy()
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
            key = int(corrid.reshape(-1)[0])
            if int(start.reshape(-1)[0]):
                self.totals[key] = np.zeros(value.shape, dtype=np.float32)
            total = self.totals.get(key, np.zeros(value.shape, dtype=np.float32)) + value
            self.totals[key] = total.astype(np.float32)
            if int(end.reshape(-1)[0]):
                self.totals.pop(key, None)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", total.astype(np.float32))]))
        return responses
