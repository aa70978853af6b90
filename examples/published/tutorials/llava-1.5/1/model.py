"""Stand-in llava-1.5: one response, text `<prompt> [<n> image(s)]` and max_tokens (default 2) as the
completion's token count; prompt tokens are the prompt's words."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "prompt").as_numpy().reshape(-1)[0].decode()
            images = pb_utils.get_input_tensor_by_name(request, "image").as_numpy().reshape(-1)
            completion = int(_scalar(request, "max_tokens", 2))
            used = len(prompt.split())
            outputs = [
                pb_utils.Tensor("text", np.array([f"{prompt} [{len(images)} image(s)]".encode()], object)),
                pb_utils.Tensor("finish_reason", np.array([b"length"], dtype=np.object_)),
                pb_utils.Tensor("prompt_tokens", np.array([used], dtype=np.int32)),
                pb_utils.Tensor("completion_tokens", np.array([completion], dtype=np.int32)),
                pb_utils.Tensor("total_tokens", np.array([used + completion], dtype=np.int32)),
            ]
            sender = request.get_response_sender()
            sender.send(
                pb_utils.InferenceResponse(outputs), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None
