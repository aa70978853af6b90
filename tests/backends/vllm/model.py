"""Stand-in for the vllm backend (a Python-based backend: Triton runs BACKEND_DIR/vllm/model.py for a
model whose config says `backend: "vllm"`). Its auto_complete_config declares a subset of the real
backend's interface the same way (text_input; stream, sampling_parameters, exclude_input_in_output
optional; text_output), decoupled and max_batch_size 0. It "generates" sampling_parameters' max_tokens
(default 3) tokens `<engine model>:<k>`, the engine model read from the version directory's model.json
as vLLM reads its engine arguments: the whole text at once, or one token a response with stream."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        inputs = [
            {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
            {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
            {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
        ]
        for tensor in inputs:
            config.add_input(tensor)
        config.add_output({"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]})
        config.set_model_transaction_policy({"decoupled": True})
        config.set_max_batch_size(0)
        return config

    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "model.json")) as f:
            self.engine_model = json.load(f)["model"]

    def execute(self, requests):
        for request in requests:
            prompt = self._value(request, "text_input", b"").decode()
            stream = bool(self._value(request, "stream", False))
            params = json.loads(self._value(request, "sampling_parameters", b"{}") or b"{}")
            exclude = bool(self._value(request, "exclude_input_in_output", False))
            tokens = [f" {self.engine_model}:{k}" for k in range(int(params.get("max_tokens", 3)))]
            sender = request.get_response_sender()
            for text in tokens if stream else [("" if exclude else prompt) + "".join(tokens)]:
                out = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    @staticmethod
    def _value(request, name, default):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return default if tensor is None else tensor.as_numpy().reshape(-1)[0]
