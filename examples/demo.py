"""`make demo`: serve the fan-out example with `tritonpipeline serve` and query it over asyncio gRPC.

Prints the compiled graph, real outputs checked against the models' arithmetic, and a
latency/throughput table at a few concurrencies; then stops the server with SIGINT (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcaio

from harness.load import WrongAnswer, closed_loop, format_table
from tritonpipeline.local.tritonserver import free_ports

HERE = Path(__file__).resolve().parent
CLI = Path(sys.executable).parent / "tritonpipeline"


def expected(x: np.ndarray) -> dict[str, np.ndarray]:
    feats = 2 * x + 1  # extractor
    return {"FEATURES": feats, "SCORE_B": 3 * feats - 2, "SCORE_C": feats.sum(axis=-1, keepdims=True)}


def start_server(pipeline: Path, ports: dict[str, int]) -> subprocess.Popen[str]:
    cmd = [
        str(CLI),
        "serve",
        str(pipeline),
        "--cpu",
        "--http-port",
        str(ports["http"]),
        "--grpc-port",
        str(ports["grpc"]),
        "--metrics-port",
        str(ports["metrics"]),
    ]
    print("$ " + " ".join(["tritonpipeline", *cmd[1:]]), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        print("  [serve] " + line.rstrip(), flush=True)
        if line.startswith("serving;"):
            return proc
    proc.kill()
    raise SystemExit("demo: the server did not become ready (see the [serve] lines above)")


async def query(url: str, model: str, concurrencies: list[int], requests: int) -> bool:
    client = grpcaio.InferenceServerClient(url)
    rng = np.random.default_rng(0)
    try:
        x = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
        t = grpcaio.InferInput("IMAGE", [1, 4], "FP32")
        t.set_data_from_numpy(x)
        result = await client.infer(model, [t])
        print(f"\none request to {model!r}: IMAGE = {x.tolist()}")
        ok = True
        for name, want in expected(x).items():
            got = result.as_numpy(name)
            good = np.allclose(got, want, rtol=1e-5)
            ok &= good
            print(f"  {name:<9}= {got.tolist()}   expected {want.tolist()}  {'ok' if good else 'WRONG'}")

        inputs = rng.normal(size=(requests, 1, 4)).astype(np.float32)

        async def call(i: int) -> None:
            t = grpcaio.InferInput("IMAGE", [1, 4], "FP32")
            t.set_data_from_numpy(inputs[i])
            r = await client.infer(model, [t])
            for k, v in expected(inputs[i]).items():
                if not np.allclose(r.as_numpy(k), v, rtol=1e-5, atol=1e-5):
                    raise WrongAnswer(f"{k} = {r.as_numpy(k).tolist()}, expected {v.tolist()}")

        await closed_loop(call, concurrency=4, requests=min(50, requests))  # warm-up
        rows = []
        for c in concurrencies:
            res = await closed_loop(call, concurrency=c, requests=requests)
            ok &= res.errors == 0
            for sample in res.error_samples:
                print(f"  error at concurrency {c}: {sample}")
            rows.append(
                [
                    str(c),
                    str(res.requests),
                    f"{res.p50:.2f}",
                    f"{res.percentile(90):.2f}",
                    f"{res.p99:.2f}",
                    f"{res.throughput:.0f}",
                    str(res.errors),
                ]
            )
        print(f"\nasyncio gRPC load on {model!r} (every response checked against the models' arithmetic)")
        print(format_table(["concurrency", "requests", "p50 ms", "p90 ms", "p99 ms", "req/s", "wrong"], rows))
        return ok
    finally:
        await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline", type=Path, default=HERE / "fanout.yaml")
    parser.add_argument("--requests", type=int, default=300, help="requests per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    ports = dict(zip(("http", "grpc", "metrics"), free_ports(3), strict=True))
    proc = start_server(args.pipeline, ports)
    try:
        ok = asyncio.run(query(f"127.0.0.1:{ports['grpc']}", "vision", args.concurrency, args.requests))
    finally:
        print("\nstopping the server (SIGINT, as Ctrl-C would)", flush=True)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        for line in rest.splitlines():
            print("  [serve] " + line)
    if not ok or proc.returncode != 0:
        print("demo FAILED", file=sys.stderr)
        return 1
    print("\ndemo OK: real tritonserver, compiled ensemble with an inserted router, correct outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
