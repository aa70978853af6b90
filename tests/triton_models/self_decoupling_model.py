"""A Python model whose auto_complete_config makes it decoupled, as the vllm backend does every model it
runs: OUTPUT = INPUT + 1, one response a request, sent through the request's response sender."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_model_transaction_policy({"decoupled": True})
        return config

    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x + 1)])
            request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
