"""Test scaffolding, not part of the product: a sequence-batched Python-backend model that reports what
Triton's sequence batcher gave it. TOTAL is the running sum of VALUE within the sequence (START resets
it, END forgets it); ID is the correlation ID as it arrived, in the CORRID control when the model has
one, else as the request carries it (a string ID as its text, a number in decimal); FLAG_TYPE is the
numpy type the START control arrived as (int32, float32 or bool). One value per request (batch 1 per
request, as the direct strategy delivers them).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def first(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}
        controls = json.loads(args["model_config"])["sequence_batching"].get("control_input", [])
        self.corrid_control = any(c["name"] == "CORRID" for c in controls)

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(first(request, "VALUE"))
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            if self.corrid_control:
                corrid = first(request, "CORRID")
                key = corrid.decode() if isinstance(corrid, bytes) else str(int(corrid))
            else:  # the ID as the request carries it, a number or a string
                key = str(request.correlation_id())
            if bool(start.reshape(-1)[0]):
                self.totals[key] = 0.0
            self.totals[key] = self.totals.get(key, 0.0) + value
            total = self.totals[key]
            if bool(first(request, "END")):
                self.totals.pop(key, None)
            outputs = [
                pb_utils.Tensor("TOTAL", np.array([[total]], dtype=np.float32)),
                pb_utils.Tensor("ID", np.array([[key.encode()]], dtype=np.object_)),
                pb_utils.Tensor("FLAG_TYPE", np.array([[start.dtype.name.encode()]], dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
