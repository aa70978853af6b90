"""Stand-in simple-gpt2: completes its config as the tutorial's does; streams `max(1, len(words))`
"tokens" `<word>#<k>` for text_input, one response each."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]})
        config.add_output({"name": "text_output", "data_type": "TYPE_STRING", "dims": [1]})
        config.set_dynamic_batching()
        config.set_max_batch_size(8)
        config.set_model_transaction_policy({"decoupled": True})
        return config

    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0][0].decode()
            words = prompt.split() or [""]
            sender = request.get_response_sender()
            for k, word in enumerate(words):
                token = np.array([[f"{word}#{k}".encode()]], dtype=np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", token)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
