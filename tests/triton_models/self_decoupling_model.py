"""A Python model that completes its config in auto_complete_config as JetStream's and NVIDIA's
tokenizer model.py files do (literal lists added under a guard, decoupled, max_batch_size 0), decoupled as
the vllm backend makes every model it runs: OUTPUT = INPUT + 1 (FP32 [2]), one response a request, sent
through the request's response sender."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [{"name": "INPUT", "data_type": "TYPE_FP32", "dims": [2]}]
        outputs = [{"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [2]}]
        config = auto_complete_model_config.as_dict()
        input_names = [i["name"] for i in config["input"]]
        output_names = [o["name"] for o in config["output"]]
        for input in inputs:
            if input["name"] not in input_names:
                auto_complete_model_config.add_input(input)
        for output in outputs:
            if output["name"] not in output_names:
                auto_complete_model_config.add_output(output)
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=True))
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", x + 1)])
            request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
