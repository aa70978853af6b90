"""Stand-in BLS: preprocessing, then the decoupled tensorrt_llm (each of its responses), then
postprocessing, one text_output per tensorrt_llm response, as the ensemble answers."""

import triton_python_backend_utils as pb_utils


def call(model, tensors, decoupled=False):
    request = pb_utils.InferenceRequest(model_name=model, inputs=tensors, requested_output_names=[])
    return request.exec(decoupled=decoupled)


def tensors(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return {t.name(): t for t in response.output_tensors()}


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            given = {
                name: pb_utils.get_input_tensor_by_name(request, name)
                for name in ("text_input", "max_tokens", "end_id", "temperature", "stream")
            }
            pre = tensors(
                call(
                    "preprocessing",
                    [
                        pb_utils.Tensor("QUERY", given["text_input"].as_numpy()),
                        pb_utils.Tensor("REQUEST_OUTPUT_LEN", given["max_tokens"].as_numpy()),
                    ],
                )
            )
            llm_inputs = [
                pb_utils.Tensor("input_ids", pre["INPUT_ID"].as_numpy()),
                pb_utils.Tensor("input_lengths", pre["REQUEST_INPUT_LEN"].as_numpy()),
                pb_utils.Tensor("request_output_len", pre["REQUEST_OUTPUT_LEN"].as_numpy()),
            ]
            for ours, theirs in (
                ("end_id", "end_id"),
                ("temperature", "temperature"),
                ("stream", "streaming"),
            ):
                if given[ours] is not None:
                    llm_inputs.append(pb_utils.Tensor(theirs, given[ours].as_numpy()))
            for response in call("tensorrt_llm", llm_inputs, decoupled=True):
                out = tensors(response)
                if "output_ids" not in out:  # the final, empty response
                    continue
                post = tensors(
                    call(
                        "postprocessing",
                        [
                            pb_utils.Tensor("TOKENS_BATCH", out["output_ids"].as_numpy()),
                            pb_utils.Tensor("SEQUENCE_LENGTH", out["sequence_length"].as_numpy()),
                        ],
                    )
                )
                sender.send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("text_output", post["OUTPUT"].as_numpy())])
                )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
