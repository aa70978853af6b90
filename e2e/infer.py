"""Check a served pipeline's numbers over HTTP with tritonclient (used by e2e/kind-gpu.sh after a
port-forward; the same checks as `make e2e-local`).

    .venv/bin/python e2e/infer.py --url 127.0.0.1:18000 vision [diamond ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local import CHECKS


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
