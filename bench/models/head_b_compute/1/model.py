"""Head B with real compute: OUTPUT_B = 3 * FEATS_IN_B - 2 (FP32 [4]).

Bench only: the workload is in ../../compute_base.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/models, through repository links
from compute_base import ComputeModel


class TritonPythonModel(ComputeModel):
    INPUT, OUTPUT = "FEATS_IN_B", "OUTPUT_B"

    @staticmethod
    def arithmetic(x):
        return 3.0 * x - 2.0
