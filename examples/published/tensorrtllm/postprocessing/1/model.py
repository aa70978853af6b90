"""Stand-in postprocessing: OUTPUT of each beam is its first SEQUENCE_LENGTH tokens, space-separated."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
            text = [
                [
                    " ".join(str(t) for t in beam[:n]).encode()
                    for beam, n in zip(item, item_lengths, strict=True)
                ]
                for item, item_lengths in zip(tokens, lengths, strict=True)
            ]
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array(text, dtype=np.object_))])
            )
        return responses
