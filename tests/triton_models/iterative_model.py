"""Test scaffolding, not part of the product: an iterative-sequence model, as Triton's request rescheduling
runs them (the tutorials' iterative GPT-2). A request with COUNT = n is answered n times, VALUE 1 .. n,
one per iteration: after each answer but the last the model hands the request back to Triton to be
rescheduled, and the last one is flagged final."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.done = {}  # request id -> answers sent

    def execute(self, requests):
        for request in requests:
            key = request.request_id()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy().reshape(-1)[0])
            sent = self.done.get(key, 0) + 1
            sender = request.get_response_sender()
            value = np.array([[sent]], dtype=np.int32)
            response = pb_utils.InferenceResponse([pb_utils.Tensor("VALUE", value)])
            if sent < count:
                self.done[key] = sent
                sender.send(response)
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                self.done.pop(key, None)
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
