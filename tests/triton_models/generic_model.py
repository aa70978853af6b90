"""Generic Python-backend model for tests: emits every declared output in its declared data type.

Test scaffolding, not part of the product. The shape of each output comes from the model's own
configuration: parameter `shapes` is a JSON object {OUTPUT: [dim, ...]} where a dim is a size or "B",
the first dimension of the request's first input. A batching model (max_batch_size > 0) prepends the
request's batch size. Outputs without an entry use their declared dims with -1 read as 1. A decoupled
model sends its one response through the response sender, flagged final.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = config.get("max_batch_size", 0) > 0
        self.inputs = [i["name"] for i in config["input"]]
        params = config.get("parameters", {})
        shapes = json.loads(params["shapes"]["string_value"]) if "shapes" in params else {}
        self.outputs = []
        for out in config["output"]:
            dims = shapes.get(out["name"], [d if d > 0 else 1 for d in out["dims"]])
            self.outputs.append((out["name"], out["data_type"], dims))
        self.decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)

    def _first_dim(self, request):
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                return int(tensor.shape()[0])
        return 1

    def _response(self, request):
        first = self._first_dim(request)
        tensors = []
        for name, data_type, dims in self.outputs:
            shape = [first if d == "B" else int(d) for d in dims]
            if self.batching:
                shape = [first, *shape]
            if data_type == "TYPE_STRING":
                array = np.full(shape, b"x", dtype=np.object_)
            else:
                array = np.ones(shape, dtype=NUMPY[data_type])
            tensors.append(pb_utils.Tensor(name, array))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        if not self.decoupled:
            return [self._response(r) for r in requests]
        for request in requests:
            sender = request.get_response_sender()
            sender.send(self._response(request), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
