"""Closed-loop load on a fan-out pipeline (examples/fanout.yaml's numbers) with the asyncio client
(tritonpipeline.client.AsyncTritonClient, HTTP), until SIGTERM or --seconds; every answer is checked.

A ClusterIP Service balances per connection (kube-proxy picks an endpoint when a connection opens), so
a client that keeps its connections forever never reaches pods added later: the load runs in chunks of
--reconnect-seconds (harness.load.closed_loop), each through a new client, as clients behind a
connection-balanced Service must to spread load.

Prints one JSON line per chunk: {"t": unix time, "ok": n, "errors": n, "wrong": n} (totals),
and a last line with "done": true. Runs inside the node's network namespace
(tests/cluster/test_node_autoscaling.py).

    python -m e2e.autoscale_load --url 10.96.12.34:8000 --pipeline vision --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.load import WrongAnswer, closed_loop
from tritonpipeline.client import AsyncTritonClient

BATCH = np.array([[1, 2, 3, 4], [0.5, -1, 2, 8]], dtype=np.float32)
FEATURES = 2 * BATCH + 1
EXPECTED = {
    "FEATURES": FEATURES,
    "SCORE_B": 3 * FEATURES - 2,
    "SCORE_C": FEATURES.sum(axis=1, keepdims=True),
}


@dataclass
class Counts:
    ok: int = 0
    errors: int = 0
    wrong: int = 0
    last_error: str = ""


async def chunk(url: str, pipeline: str, concurrency: int, seconds: float, counts: Counts) -> None:
    """`seconds` of closed-loop load through one new client (new connections), answers checked."""

    async with AsyncTritonClient(url, protocol="http", header=None) as client:

        async def call(_: int) -> None:
            result = await client.infer(pipeline, [client.input("IMAGE", BATCH)])
            if not all(np.allclose(result.as_numpy(k), v) for k, v in EXPECTED.items()):
                counts.wrong += 1
                raise WrongAnswer(f"{pipeline}: wrong numbers")

        result = await closed_loop(call, concurrency=concurrency, requests=10**9, max_seconds=seconds)
    counts.ok += result.requests
    counts.errors += result.errors
    if result.error_samples:
        counts.last_error = result.error_samples[-1][:300]


async def run(args: argparse.Namespace) -> Counts:
    stop, counts = asyncio.Event(), Counts()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    if args.seconds:
        loop.call_later(args.seconds, stop.set)
    while not stop.is_set():
        await chunk(args.url, args.pipeline, args.concurrency, args.reconnect_seconds, counts)
        report(counts)
    report(counts, done=True)
    return counts


def report(counts: Counts, done: bool = False) -> None:
    line: dict[str, Any] = {"t": time.time(), "ok": counts.ok, "errors": counts.errors, "wrong": counts.wrong}
    if counts.last_error:
        line["last_error"] = counts.last_error
    if done:
        line["done"] = True
    print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="HOST:PORT of the pipeline's HTTP endpoint")
    parser.add_argument("--pipeline", default="vision")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--reconnect-seconds", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: at SIGTERM)")
    args = parser.parse_args(argv)
    counts = asyncio.run(run(args))
    return 0 if counts.ok and not counts.wrong else 1


if __name__ == "__main__":
    sys.exit(main())
