"""The router as it was before CPU tensors went through DLPack (bench/router_cost.py compares the two).

Copies its one input to one output per consumer: GPU tensors through DLPack, CPU tensors through numpy.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_names = [output["name"] for output in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, self.input_name)
            if tensor.is_cpu():
                array = tensor.as_numpy()
                outputs = [pb_utils.Tensor(name, array) for name in self.output_names]
            else:
                # one fresh DLPack capsule per output: a capsule can be consumed only once
                outputs = [
                    pb_utils.Tensor.from_dlpack(name, tensor.to_dlpack()) for name in self.output_names
                ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
