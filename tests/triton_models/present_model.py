"""Test scaffolding, not part of the product: a Python-backend model that answers which of its inputs a
request carried. Every declared output (FP32) holds the same code, the sum of 2**i over the inputs present,
i being the input's position in the model's configuration; one value per batch item when the model
batches (the first present input's first dimension), else shape [1].
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.batching = config.get("max_batch_size", 0) > 0
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            present = {}
            for name in self.inputs:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    present[name] = tensor.as_numpy().shape
            code = sum(2**i for i, name in enumerate(self.inputs) if name in present)
            first = next(iter(present.values()), (1,))
            shape = [first[0], 1] if self.batching else [1]
            array = np.full(shape, code, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(o, array) for o in self.outputs]))
        return responses
