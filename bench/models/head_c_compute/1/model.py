"""Head C with real compute: OUTPUT_C = sum of FEATS_IN_C (FP32 [4] -> FP32 [1]).

Bench only: the workload is in ../../compute_base.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/models, through repository links
from compute_base import ComputeModel


class TritonPythonModel(ComputeModel):
    INPUT, OUTPUT = "FEATS_IN_C", "OUTPUT_C"

    @staticmethod
    def arithmetic(x):
        return x.sum(axis=-1, keepdims=True)
