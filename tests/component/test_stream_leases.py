"""With `routing.sessionAffinity: Stream`, on a real tritonserver serving a Stream pipeline: idle TCP and
gRPC connections and a raw tritonclient stream count for nothing; a SequenceStream counts while it is
open, also past the lease time (its renewals), and no more once its sequence ends or it closes; one whose
process stops answering stops counting after the lease time, its connection still established. The leases
and the preStop's test: tests/unit/test_stream_leases.py."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from harness.wait import wait_for
from helpers import established
from support.stream_leases import run_test, stream_doc
from tritonpipeline.client import SequenceStream
from tritonpipeline.compiler import (
    OPEN_STREAMS_FILE,
    OPEN_STREAMS_LEASE_SECONDS,
)
from tritonpipeline.compiler import open_streams_model as model
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.spec import parse_pipeline


def chunk(seq: SequenceStream, code: int = 1) -> list[Any]:
    return [seq.input("CHUNK", np.array([[code]], dtype=np.int32))]


class Pod:
    """What a Stream pod's drain and status read on one real tritonserver: the gauge on /metrics, the
    count file in the (temporary) drain directory, and the preStop's shell test of that file."""

    def __init__(self, server: Any, run_dir: Path) -> None:
        self.server = server
        self.file = run_dir / OPEN_STREAMS_FILE

    def gauge(self) -> int | None:
        with urllib.request.urlopen(self.server.metrics_url, timeout=10) as response:
            return tm.read_scrape(response.read().decode(), 0).open_streams

    def counted(self) -> tuple[int | None, int | None, bool]:
        """(gauge, count in the file, whether the preStop test holds the pod)."""
        written = self.file.read_text().split()[0] if self.file.exists() else None
        return self.gauge(), None if written is None else int(written), run_test(self.file) == 0

    async def reaches(self, want: tuple[int, int, bool], timeout: float = 5) -> None:
        """Wait (the event loop running, so that streams renew) until counted() is `want`."""
        await asyncio.to_thread(wait_for, f"counted {want}", lambda: self.counted() == want, timeout)


@pytest.fixture
def stream_pod(serve_pipeline, tmp_path, monkeypatch) -> Pod:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv(model.RUN_DIR_ENV, str(run_dir))  # the pod's /tp/run; tritonserver passes it on
    pod = Pod(serve_pipeline(stream_doc()), run_dir)
    wait_for("the count file", lambda: pod.counted() == (0, 0, False), timeout=10)
    return pod


def raw_sequence(server: Any) -> Any:
    """A plain tritonclient gRPC stream (not the helper) with a sequence open on it."""
    raw = grpcclient.InferenceServerClient(
        server.grpc_url, channel_args=[("grpc.use_local_subchannel_pool", 1)]
    )
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    raw.start_stream(callback=lambda result, error: answers.put((result, error)))
    tensor = grpcclient.InferInput("CHUNK", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[3]], dtype=np.int32))
    raw.async_stream_infer("streaming", [tensor], sequence_id=77, sequence_start=True)
    _, error = answers.get(timeout=60)
    assert error is None, error
    return raw


@pytest.mark.tritonserver
def test_idle_connections_and_unregistered_streams_hold_nothing_the_helpers_stream_does(stream_pod):
    server = stream_pod.server
    idle_tcp = socket.create_connection(("127.0.0.1", server.grpc_port))
    idle_grpc = grpcclient.InferenceServerClient(
        server.grpc_url, channel_args=[("grpc.use_local_subchannel_pool", 1)]
    )
    assert idle_grpc.is_server_live()  # its HTTP/2 connection stays open, idle
    raw = raw_sequence(server)
    try:
        assert established(server.grpc_port) >= 3  # what the drain counted before: all of these
        time.sleep(2.5 * model.PERIOD_SECONDS)  # a publication or two later: still nothing
        assert stream_pod.counted() == (0, 0, False)

        async def helper_streams() -> None:
            async with SequenceStream(server.grpc_url, "streaming") as seq:
                await seq.send(chunk(seq))
                await stream_pod.reaches((1, 1, True))
                await seq.send(chunk(seq), end=True)  # the sequence ended: released, the stream still open
                await stream_pod.reaches((0, 0, False))
            async with SequenceStream(server.grpc_url, "streaming") as seq:  # closed before its END
                await seq.send(chunk(seq))
                await stream_pod.reaches((1, 1, True))
            await stream_pod.reaches((0, 0, False))

        asyncio.run(helper_streams())
    finally:
        raw.stop_stream()
        raw.close()
        idle_grpc.close()
        idle_tcp.close()


@pytest.mark.tritonserver
def test_the_pre_stop_waits_for_the_helpers_stream_and_ends_when_it_closes(stream_pod, tmp_path):
    """The exact preStop of a Stream pod (its drain directory substituted, the 10 s propagation wait
    left out): it waits while a SequenceStream is open, and ends within a second or two of its close,
    far from streamDrainSeconds."""
    drain = autoscaling_objects.drain(parse_pipeline(stream_doc()))
    assert drain is not None and drain.stream_wait_seconds == 600
    script = drain.pre_stop()[2].replace(autoscaling_objects.DRAIN_DIR, str(stream_pod.file.parent))
    script = script.replace(f"sleep {autoscaling_objects.PRE_STOP_SECONDS};", "sleep 0;")
    server = stream_pod.server

    async def run() -> float:
        async with SequenceStream(server.grpc_url, "streaming") as seq:
            await seq.send(chunk(seq))
            await stream_pod.reaches((1, 1, True))
            pre_stop = subprocess.Popen(["/bin/sh", "-c", script])
            await asyncio.sleep(3)
            assert pre_stop.poll() is None  # waiting for the stream
            assert (stream_pod.file.parent / "draining").exists()
        closed = time.monotonic()
        await asyncio.to_thread(pre_stop.wait, 10)
        return time.monotonic() - closed

    waited = asyncio.run(run())
    print(f"\npreStop ended {waited:.1f}s after the stream closed")
    assert waited < 6, waited  # the count written within a second, the preStop's next look a second on


VANISHING_CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    import numpy as np
    from tritonpipeline.client import SequenceStream

    async def main():
        seq = SequenceStream(sys.argv[1], "streaming")
        await seq.send([seq.input("CHUNK", np.array([[1]], dtype=np.int32))])
        print("open", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


@pytest.mark.tritonserver
def test_a_stream_whose_client_stops_counts_until_its_lease_runs_out(stream_pod):
    """A client process that stops (SIGSTOP: a hung or cut-off client, its TCP connection still
    established) stops counting once its lease runs out, LEASE_SECONDS after its last renewal; a live
    SequenceStream next to it renews its lease and counts all along."""
    server = stream_pod.server
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    vanishing = subprocess.Popen(
        [sys.executable, "-c", VANISHING_CLIENT, server.grpc_url], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert vanishing.stdout is not None and vanishing.stdout.readline().strip() == "open"

        async def run() -> float:
            async with SequenceStream(server.grpc_url, "streaming") as live:
                await live.send(chunk(live))
                await stream_pod.reaches((2, 2, True))
                connections = established(server.grpc_port)
                vanishing.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                await stream_pod.reaches((1, 1, True), timeout=OPEN_STREAMS_LEASE_SECONDS + 5)
                gone = time.monotonic() - stopped
                assert established(server.grpc_port) == connections  # its connection is still there
                await asyncio.sleep(OPEN_STREAMS_LEASE_SECONDS - gone + 2)  # past the live one's lease too
                assert stream_pod.counted() == (1, 1, True)  # renewed all along
            await stream_pod.reaches((0, 0, False))
            return gone

        gone = asyncio.run(run())
        print(f"\nthe stopped client's stream counted {gone:.1f}s more (lease {OPEN_STREAMS_LEASE_SECONDS}s)")
        # its last renewal came at most a third of the lease time before it stopped
        assert OPEN_STREAMS_LEASE_SECONDS * 2 / 3 - 1 <= gone <= OPEN_STREAMS_LEASE_SECONDS + 2, gone
    finally:
        vanishing.kill()
        vanishing.wait(timeout=10)
