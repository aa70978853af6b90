"""Shared code of the bench-only *_compute models (extractor_compute, head_b_compute, head_c_compute).

Each has the same input, output and numbers as its twin in model_repository/. In addition every
request runs a real numpy workload: a chain of COMPUTE_REPS dense float32 products of a vector derived
from the request's input with a fixed COMPUTE_DIM x COMPUTE_DIM random matrix (seeded by COMPUTE_SEED,
built in initialize), each followed by tanh. Its result is checked (shape, dtype, all finite) and a
failed check fails the request; the result does not enter the output, which stays exactly the
example's numbers. The three sizes come from config.pbtxt `parameters` (the CR's model `parameters`).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _param(config, key, default):
    entry = config.get("parameters", {}).get(key)
    return int(entry["string_value"]) if entry else default


class ComputeModel:
    """Base of the *_compute models: subclasses set INPUT, OUTPUT and `arithmetic`."""

    INPUT = OUTPUT = ""

    @staticmethod
    def arithmetic(x):
        raise NotImplementedError

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dim = _param(config, "COMPUTE_DIM", 512)
        self.reps = _param(config, "COMPUTE_REPS", 1)
        rng = np.random.default_rng(_param(config, "COMPUTE_SEED", 0))
        scale = np.float32(1.0 / np.sqrt(self.dim))
        self.weight = rng.standard_normal((self.dim, self.dim), dtype=np.float32) * scale

    def compute(self, x):
        """The per-request workload: [B, 4] input -> [B, COMPUTE_DIM], checked, then dropped."""
        rows = x.reshape(x.shape[0], -1).astype(np.float32)
        v = np.tile(rows, (1, -(-self.dim // rows.shape[1])))[:, : self.dim]
        v = v / np.float32(1.0 + np.abs(v).max())
        for _ in range(self.reps):
            v = np.tanh(v @ self.weight)
        if v.shape != (rows.shape[0], self.dim) or v.dtype != np.float32 or not np.isfinite(v).all():
            raise pb_utils.TritonModelException(f"compute check failed: {v.dtype} {v.shape}")
        return v

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, self.INPUT).as_numpy()
            try:
                self.compute(x)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            out = self.arithmetic(x).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.OUTPUT, out)]))
        return responses
