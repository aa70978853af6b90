"""Stand-in generator (decoupled, one request at a time): token k of a request is
(sum(input_ids) + k * step) % 1000, step = round(10 * temperature) or 1, for request_output_len tokens,
stopping after a token equal to end_id. streaming true: one response per token; otherwise one with all.
output_ids is [batch, beam 1, tokens], sequence_length [batch, beam 1]. Like the real model, it needs the
scalars as the config's reshape gives them: [batch], not [batch, 1]."""

import numpy as np
import triton_python_backend_utils as pb_utils


def optional(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


def answer(tokens):
    ids = np.array([[tokens]], dtype=np.int32)
    length = np.array([[len(tokens)]], dtype=np.int32)
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("output_ids", ids), pb_utils.Tensor("sequence_length", length)]
    )


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for name in ("input_lengths", "request_output_len"):  # [batch], as the config's reshape says
                shape = pb_utils.get_input_tensor_by_name(request, name).as_numpy().shape
                if len(shape) != 1:
                    raise pb_utils.TritonModelException(f"{name}: expected shape [batch], got {list(shape)}")
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy().reshape(-1)
            count = int(
                pb_utils.get_input_tensor_by_name(request, "request_output_len").as_numpy().reshape(-1)[0]
            )
            temperature, end_id, streaming = (
                optional(request, n) for n in ("temperature", "end_id", "streaming")
            )
            step = round(10 * float(temperature)) if temperature is not None else 1
            tokens = []
            for k in range(count):
                token = (int(ids.sum()) + k * step) % 1000
                tokens.append(token)
                if streaming:
                    sender.send(answer([token]))
                if end_id is not None and token == int(end_id):
                    break
            if not streaming:
                sender.send(answer(tokens))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
