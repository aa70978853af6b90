"""Check a served pipeline's numbers over HTTP with tritonclient: the checks of `make e2e-local`, and a
command for e2e/kind-gpu.sh (after a port-forward) and the node tests (inside the node's network
namespace). Needs only numpy and tritonclient, so it runs as a plain script anywhere.

    .venv/bin/python e2e/infer.py --url 127.0.0.1:18000 vision [diamond ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def _fanout(client: Any, name: str) -> str:
    import numpy as np
    import tritonclient.http as httpclient

    x = np.array([[1, 2, 3, 4], [0.5, -1, 2, 8]], dtype=np.float32)
    t = httpclient.InferInput("IMAGE", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    r = client.infer(name, [t])
    feats = 2 * x + 1
    np.testing.assert_allclose(r.as_numpy("FEATURES"), feats)
    np.testing.assert_allclose(r.as_numpy("SCORE_B"), 3 * feats - 2)
    np.testing.assert_allclose(r.as_numpy("SCORE_C"), feats.sum(axis=1, keepdims=True))
    return f"FEATURES=2x+1, SCORE_B=3(2x+1)-2, SCORE_C=sum(2x+1) for batch {x.shape[0]}"


def _diamond(client: Any, name: str) -> str:
    import numpy as np
    import tritonclient.http as httpclient

    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    t = httpclient.InferInput("IMAGE", [1, 4], "FP32")
    t.set_data_from_numpy(x)
    r = client.infer(name, [t])
    feats = 2 * x + 1
    np.testing.assert_allclose(r.as_numpy("RESULT"), (3 * feats - 2) - feats.sum(axis=1, keepdims=True))
    return f"RESULT={r.as_numpy('RESULT').tolist()[0]} = (3(2x+1)-2) - sum(2x+1)"


def _streaming(client: Any, name: str) -> str:
    import numpy as np
    import tritonclient.http as httpclient

    totals: dict[int, float] = {}
    # two interleaved sequences must keep separate running sums (sequence batching)
    for k, (seq, code) in enumerate([(11, 4), (22, 100), (11, -2), (22, 1), (11, 10)]):
        t = httpclient.InferInput("CHUNK", [1, 1], "INT32")
        t.set_data_from_numpy(np.array([[code]], dtype=np.int32))
        first = seq not in totals
        last = k >= 3
        r = client.infer(name, [t], sequence_id=seq, sequence_start=first, sequence_end=last)
        totals[seq] = totals.get(seq, 0.0) + code / 2
        got = float(r.as_numpy("TOTAL")[0, 0])
        assert abs(got - totals[seq]) < 1e-6, f"sequence {seq}: TOTAL {got} != {totals[seq]}"
    return f"running sums per sequence {totals}"


CHECKS: dict[str, Callable[[Any, str], str]] = {
    "vision": _fanout,
    "diamond": _diamond,
    "streaming": _streaming,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="HOST:PORT of Triton's HTTP endpoint")
    parser.add_argument("pipelines", nargs="+", choices=sorted(CHECKS))
    args = parser.parse_args(argv)
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(args.url)
    failed = 0
    try:
        for name in args.pipelines:
            try:
                print(f"PASS {name}: {CHECKS[name](client, name)}")
            except Exception as exc:  # report every pipeline, then fail
                failed += 1
                print(f"FAIL {name}: {type(exc).__name__}: {exc}")
    finally:
        client.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
