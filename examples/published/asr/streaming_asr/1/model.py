"""Stand-in stateful decoder: the transcript of a stream so far is "<id>: c1 c2 ..." where ck is the sum
of chunk k's features (rounded); START begins a new transcript, END forgets it."""

import numpy as np
import triton_python_backend_utils as pb_utils


def flag(request, name):
    return bool(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.streams = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = str(request.correlation_id())
            speech = pb_utils.get_input_tensor_by_name(request, "speech").as_numpy()
            if flag(request, "START"):
                self.streams[key] = []
            words = self.streams.setdefault(key, [])
            words.append(str(round(float(speech.sum()))))
            text = f"{key}: {' '.join(words)}"
            if flag(request, "END"):
                del self.streams[key]
            out = np.array([[text.encode()]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("transcript", out)]))
        return responses
