"""BLS fan-out, the hand-written fallback users reach for: extractor, then head_b and head_c at once.

Same work as the `vision` ensemble of examples/fanout.yaml (without FEATURES): IMAGE -> extractor ->
FEATS_A -> head_b (SCORE_B) and head_c (SCORE_C). `async def execute` with `async_exec` so the two
heads run concurrently. The bench writes this model's config.pbtxt.
"""

import asyncio

import triton_python_backend_utils as pb_utils


def _output(response, name):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, name)


class TritonPythonModel:
    async def _one(self, request):
        image = pb_utils.get_input_tensor_by_name(request, "IMAGE")
        extract = pb_utils.InferenceRequest(
            model_name="extractor",
            requested_output_names=["FEATS_A"],
            inputs=[pb_utils.Tensor("INPUT_A", image.as_numpy())],
        )
        feats = _output(await extract.async_exec(), "FEATS_A").as_numpy()
        head_b = pb_utils.InferenceRequest(
            model_name="head_b",
            requested_output_names=["OUTPUT_B"],
            inputs=[pb_utils.Tensor("FEATS_IN_B", feats)],
        )
        head_c = pb_utils.InferenceRequest(
            model_name="head_c",
            requested_output_names=["OUTPUT_C"],
            inputs=[pb_utils.Tensor("FEATS_IN_C", feats)],
        )
        out_b, out_c = await asyncio.gather(head_b.async_exec(), head_c.async_exec())
        score_b = _output(out_b, "OUTPUT_B").as_numpy()
        score_c = _output(out_c, "OUTPUT_C").as_numpy()
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("SCORE_B", score_b), pb_utils.Tensor("SCORE_C", score_c)]
        )

    async def execute(self, requests):
        results = await asyncio.gather(*(self._one(r) for r in requests), return_exceptions=True)
        responses = []
        for result in results:
            if isinstance(result, BaseException):
                result = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(result)))
            responses.append(result)
        return responses
