"""Stand-in feature extractor: speech = 2 * wav."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("speech", 2 * pb_utils.get_input_tensor_by_name(r, "wav").as_numpy())]
            )
            for r in requests
        ]
