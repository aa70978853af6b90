"""BLS two-branch choice, the hand-written fallback: classifier, then the small or the large branch.

Same work as the `cond_bench` pipeline of bench/dataplane.py (the `switched` pipeline of
examples/conditional.yaml, plus its LABEL output): IMAGE -> classifier (LABEL); LABEL 1 -> head_b
(RESULT = OUTPUT_B), anything else -> extractor (RESULT = FEATS_A), on the models its config's
parameters CLASSIFIER, EXTRACTOR and HEAD_B name (the workload's, as the bench links them). Each request
of a batch is handled on its own (`async_exec`, concurrently). The bench writes this model's
config.pbtxt: the orchestrator's inputs, outputs, instance group and dynamic batching, and those
parameters.
"""

import asyncio
import json

import triton_python_backend_utils as pb_utils


def _output(response, name):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, name)


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.models = {
            role: parameters[role.upper()]["string_value"] for role in ("classifier", "extractor", "head_b")
        }

    async def _one(self, request):
        image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
        classify = pb_utils.InferenceRequest(
            model_name=self.models["classifier"],
            requested_output_names=["LABEL"],
            inputs=[pb_utils.Tensor("X", image)],
        )
        label = _output(await classify.async_exec(), "LABEL").as_numpy()
        if int(label.reshape(-1)[0]) == 1:
            model, tensor, output = self.models["head_b"], "FEATS_IN_B", "OUTPUT_B"
        else:
            model, tensor, output = self.models["extractor"], "INPUT_A", "FEATS_A"
        branch = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=[output], inputs=[pb_utils.Tensor(tensor, image)]
        )
        result = _output(await branch.async_exec(), output).as_numpy()
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("RESULT", result), pb_utils.Tensor("LABEL", label)]
        )

    async def execute(self, requests):
        results = await asyncio.gather(*(self._one(r) for r in requests), return_exceptions=True)
        responses = []
        for result in results:
            if isinstance(result, BaseException):
                result = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(result)))
            responses.append(result)
        return responses
