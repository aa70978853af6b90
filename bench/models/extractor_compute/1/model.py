"""Feature extractor with real compute: FEATS_A = 2 * INPUT_A + 1 (FP32 [4]).

Bench only: the workload is in ../../compute_base.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/models, through repository links
from compute_base import ComputeModel


class TritonPythonModel(ComputeModel):
    INPUT, OUTPUT = "INPUT_A", "FEATS_A"

    @staticmethod
    def arithmetic(x):
        return 2.0 * x + 1.0
