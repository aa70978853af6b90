"""Test model: OUT = IN, for whatever data type and shape its config declares (via numpy)."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        self.output_name, pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy()
                    )
                ]
            )
            for r in requests
        ]
