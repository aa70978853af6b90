"""What tests/unit/test_optional_inputs.py and tests/component/test_optional_inputs.py share."""

from __future__ import annotations

import copy
from typing import Any

from helpers import doc_of


def present(name: str, inputs: dict[str, bool], outputs: list[str], mbs: int = 8) -> dict[str, Any]:
    """A present_model: inputs NAME -> optional, all FP32 [1]."""
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": mbs,
        "inputs": [
            {"name": n, "dataType": "FP32", "dims": [1], "optional": opt} for n, opt in inputs.items()
        ],
        "outputs": [{"name": n, "dataType": "FP32", "dims": [1]} for n in outputs],
        "instances": [{"kind": "CPU", "count": 1}],
    }


# TensorRT-LLM's shape: preprocessing -> tensorrt_llm -> postprocessing, the sampling settings optional
MODELS = [
    # BAD_WORDS is optional and no step maps it; REQUEST_OUTPUT_LEN is optional and mapped
    present("preprocessing", {"QUERY": False, "REQUEST_OUTPUT_LEN": True, "BAD_WORDS": True}, ["INPUT_ID"]),
    present("tensorrt_llm", {"input_ids": False, "temperature": True}, ["output_ids"]),
    present("postprocessing", {"TOKENS": False, "TEMPERATURE": True}, ["OUTPUT"]),
]


def llm_pipeline(fan_out: str) -> dict[str, Any]:
    return {
        "name": f"ensemble_{fan_out}",
        "inputs": [
            {"name": "text_input", "dataType": "FP32", "dims": [1]},
            {"name": "max_tokens", "dataType": "FP32", "dims": [1], "optional": True},
            {"name": "temperature", "dataType": "FP32", "dims": [1], "optional": True},
        ],
        "steps": [
            {
                "model": "preprocessing",
                "inputs": {"QUERY": "inputs.text_input", "REQUEST_OUTPUT_LEN": "inputs.max_tokens"},
            },
            # temperature goes to two steps: a router copies it under fanOut: router
            {
                "model": "tensorrt_llm",
                "inputs": {"input_ids": "preprocessing.INPUT_ID", "temperature": "inputs.temperature"},
            },
            {
                "model": "postprocessing",
                "inputs": {"TOKENS": "tensorrt_llm.output_ids", "TEMPERATURE": "inputs.temperature"},
            },
        ],
        "outputs": [
            {"name": "pre", "from": "preprocessing.INPUT_ID"},
            {"name": "llm", "from": "tensorrt_llm.output_ids"},
            {"name": "text_output", "from": "postprocessing.OUTPUT"},
        ],
        "fanOut": fan_out,
    }


def llm_doc() -> dict[str, Any]:
    return doc_of("llm", copy.deepcopy(MODELS), [llm_pipeline("router"), llm_pipeline("shared")])
