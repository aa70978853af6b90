"""Stand-in preprocessing: INPUT_ID are the UTF-8 bytes of QUERY (right-padded with 0 across a batch)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            queries = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy().reshape(-1)
            wanted = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()
            ids = [list(q if isinstance(q, bytes) else str(q).encode()) for q in queries]
            width = max(len(i) for i in ids)
            input_id = np.array([i + [0] * (width - len(i)) for i in ids], dtype=np.int32)
            lengths = np.array([[len(i)] for i in ids], dtype=np.int32)
            outputs = [
                pb_utils.Tensor("INPUT_ID", input_id),
                pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
                pb_utils.Tensor("REQUEST_OUTPUT_LEN", wanted.reshape(len(ids), -1).astype(np.int32)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
