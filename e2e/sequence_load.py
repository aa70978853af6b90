"""Many concurrent interleaved sequences on examples/streaming.yaml (TOTAL = running sum of 0.5 * CHUNK),
each with its own expected running state, until SIGTERM or --seconds. Every answer is checked.

Each of --lanes lanes runs one sequence after another: --chunks chunks of random codes, --gap seconds
apart, then the next sequence with a new ID. Two ways to send them, one per routing mode:

- `stream`: tritonpipeline.client.SequenceStream to the Service's gRPC port (routing.sessionAffinity
  Stream): one gRPC stream on a connection of its own per sequence;
- `header`: tritonpipeline.client.AsyncTritonClient over HTTP with the sequence ID in the affinity header,
  to a proxy that routes on it (routing.sessionAffinity Header), one client (connection pool) per lane.

Prints one JSON line per sequence: {"lane", "id", "start", "end" (unix times), "sent" (chunks answered
right), "chunks", "max_rtt_s" (the slowest chunk's round trip), "error" (null, or why it stopped: a
wrong total or the error text)}, then {"done": true}.
A sequence whose first chunk failed never held state: a caller counts it as refused, not broken.

    python -m e2e.sequence_load --mode stream --url 10.96.12.34:8001 --lanes 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
import time
from typing import Any

import numpy as np

from tritonpipeline.client import DEFAULT_HEADER, AsyncTritonClient, SequenceStream

PIPELINE = "streaming"


class Sender:
    """One chunk of one sequence at a time, by one routing mode."""

    async def start(self, sequence_id: int) -> None: ...

    async def send(self, code: int, first: bool, last: bool) -> float:
        raise NotImplementedError

    async def finish(self) -> None: ...


class StreamSender(Sender):
    def __init__(self, url: str) -> None:
        self.url = url
        self.seq: SequenceStream | None = None

    async def start(self, sequence_id: int) -> None:
        self.seq = SequenceStream(self.url, PIPELINE, sequence_id=sequence_id)

    async def send(self, code: int, first: bool, last: bool) -> float:
        assert self.seq is not None
        chunk = self.seq.input("CHUNK", np.array([[code]], dtype=np.int32))
        return float((await self.seq.send([chunk], end=last)).as_numpy("TOTAL")[0][0])

    async def finish(self) -> None:
        if self.seq is not None:
            await self.seq.close()


class HeaderSender(Sender):
    def __init__(self, url: str) -> None:
        self.client = AsyncTritonClient(url, protocol="http", header=DEFAULT_HEADER)
        self.sequence_id = 0

    async def start(self, sequence_id: int) -> None:
        self.sequence_id = sequence_id

    async def send(self, code: int, first: bool, last: bool) -> float:
        chunk = self.client.input("CHUNK", np.array([[code]], dtype=np.int32))
        result = await self.client.infer(
            PIPELINE,
            [chunk],
            sequence_id=self.sequence_id,
            sequence_start=first,
            sequence_end=last,
        )
        return float(result.as_numpy("TOTAL")[0][0])

    async def close(self) -> None:
        await self.client.close()


async def lane(index: int, args: argparse.Namespace, stop: asyncio.Event, rng: random.Random) -> None:
    header = HeaderSender(args.url) if args.mode == "header" else None
    try:
        number = 0
        while not stop.is_set():
            number += 1
            sequence_id = (index + 1) * 1_000_000 + number
            sender: Sender = header if header is not None else StreamSender(args.url)
            record: dict[str, Any] = {"lane": index, "id": sequence_id, "start": time.time(), "sent": 0}
            record["chunks"] = args.chunks
            record["max_rtt_s"] = 0.0
            total = 0.0
            try:
                await sender.start(sequence_id)
                for i in range(args.chunks):
                    code = rng.randint(-50, 50)
                    total += 0.5 * code
                    sent_at = time.monotonic()
                    got = await sender.send(code, i == 0, i == args.chunks - 1)
                    record["max_rtt_s"] = round(max(record["max_rtt_s"], time.monotonic() - sent_at), 3)
                    if abs(got - total) > 1e-3:
                        raise ValueError(f"wrong total at chunk {i}: {got}, expected {total}")
                    record["sent"] = i + 1
                    if i < args.chunks - 1:
                        await asyncio.sleep(args.gap)
                record["error"] = None
            except Exception as exc:  # every failure is a result here, counted by the caller
                record["error"] = f"{type(exc).__name__}: {exc}"[:300]
            finally:
                if header is None:
                    await sender.finish()
            record["end"] = time.time()
            print(json.dumps(record), flush=True)
            if record["error"] and record["sent"] == 0:
                await asyncio.sleep(0.2)  # refused (no pod to take it yet): do not spin
    finally:
        if header is not None:
            await header.close()


async def main_async(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    if args.seconds:
        loop.call_later(args.seconds, stop.set)
    rng = random.Random(args.seed)
    lanes = [asyncio.create_task(lane(i, args, stop, random.Random(rng.random()))) for i in range(args.lanes)]
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*lanes)
    print(json.dumps({"done": True}), flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["stream", "header"], required=True)
    p.add_argument("--url", required=True, help="HOST:PORT (gRPC for stream, HTTP for header)")
    p.add_argument("--lanes", type=int, default=16, help="sequences open at once")
    p.add_argument("--chunks", type=int, default=20, help="chunks per sequence")
    p.add_argument("--gap", type=float, default=0.25, help="seconds between two chunks of a sequence")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: at SIGTERM)")
    p.add_argument("--seed", type=int, default=13)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    asyncio.run(main_async(parse(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
