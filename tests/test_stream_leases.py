"""With `routing.sessionAffinity: Stream` a leaving pod waits only for the streams the client helper
registered with the generated open-streams model (compiler/open_streams_model.py): the model's lease
bookkeeping and the preStop's test of its count file (pure), then on a real tritonserver serving a Stream
pipeline: idle TCP and gRPC connections and a raw tritonclient stream count for nothing; a
SequenceStream counts while it is open, also past the lease time (its renewals), and no more once its
sequence ends or it closes; a SequenceStream whose process stops answering stops counting after the lease
time, its connection still established."""

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
from helpers import established, example
from tritonpipeline import client
from tritonpipeline.client import SequenceStream
from tritonpipeline.compiler import (
    OPEN_STREAMS_FILE,
    OPEN_STREAMS_GAUGE,
    OPEN_STREAMS_LEASE_SECONDS,
    OPEN_STREAMS_MODEL,
)
from tritonpipeline.compiler import open_streams_model as model
from tritonpipeline.compiler.triton_config import open_streams_config
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.render import triton_metrics as tm
from tritonpipeline.spec import parse_pipeline

# --------------------------------------------------------------------------------------------- pure


def test_leases_open_renew_close_and_run_out():
    leases = model.Leases(seconds=15, limit=3)
    leases.open(b"a", now=0)
    leases.open(b"b", now=5)
    assert leases.count(now=14.9) == 2
    leases.open(b"a", now=10)  # renewed: until 25
    assert leases.count(now=20) == 1  # b ran out at 20
    leases.close(b"a")
    leases.close(b"never-opened")
    assert leases.count(now=20) == 0
    leases.open(b"c", now=30)
    leases.open(b"d", now=30)
    assert leases.count(now=44.9) == 2
    assert leases.count(now=45) == 0  # not renewed for 15 s: gone


def test_leases_beyond_the_limit_are_not_kept_but_known_ones_renew():
    leases = model.Leases(seconds=15, limit=2)
    for lease in (b"a", b"b", b"c"):
        leases.open(lease, now=0)
    assert sorted(leases.deadlines) == [b"a", b"b"]
    leases.open(b"a", now=10)  # a renewal at the limit still counts
    assert leases.count(now=16) == 1


def test_model_client_and_pod_agree_on_names_and_times():
    assert model.GAUGE == OPEN_STREAMS_GAUGE
    assert model.LEASE_SECONDS == OPEN_STREAMS_LEASE_SECONDS == client.STREAM_LEASE_SECONDS
    assert model.COUNT_FILE == OPEN_STREAMS_FILE
    assert (
        model.RUN_DIR == autoscaling_objects.DRAIN_DIR
    )  # the pod's emptyDir (render/manifests.py mounts it)
    assert (
        Path(autoscaling_objects.OPEN_STREAMS_PATH) == Path(autoscaling_objects.DRAIN_DIR) / OPEN_STREAMS_FILE
    )
    assert client.OPEN_STREAMS_MODEL == OPEN_STREAMS_MODEL
    assert model.MAX_LEASE_ID_BYTES >= 32  # the helper's IDs: 16 random bytes in hex


def test_the_model_is_decoupled_so_only_a_stream_registers():
    cfg = open_streams_config(OPEN_STREAMS_MODEL)
    assert cfg.model_transaction_policy.decoupled
    assert [(i.name, i.data_type) for i in cfg.input] == [("LEASE", 13), ("OPEN", 1)]  # STRING, BOOL
    assert [o.name for o in cfg.output] == ["OPEN_STREAMS", "LEASE_SECONDS"]


def test_the_pre_stop_waits_on_the_count_file_not_on_connections():
    drain = autoscaling_objects.drain(parse_pipeline(stream_doc()))
    assert drain is not None
    script = drain.pre_stop()[2]
    assert (
        autoscaling_objects.open_streams_test() in script and autoscaling_objects.OPEN_STREAMS_PATH in script
    )
    assert "/proc/net/tcp" not in script
    assert f"-ge $(($(date +%s) - {OPEN_STREAMS_LEASE_SECONDS}))" in script  # an old count is none


def run_test(path: Path) -> int:
    return subprocess.run(
        ["/bin/sh", "-c", autoscaling_objects.open_streams_test(str(path))], timeout=10
    ).returncode


@pytest.mark.parametrize(
    ("content", "holds"),
    [
        (None, False),  # no file (the model not loaded, a pipeline without it)
        ("0 {now}", False),
        ("2 {now}", True),
        ("1 {fresh}", True),
        ("3 {stale}", False),  # written before the lease time: a model that stopped writing
        ("", False),
        ("many {now}", False),
        ("2 yesterday", False),
    ],
)
def test_the_pre_stop_test_reads_the_count_and_its_age(tmp_path, content, holds):
    path = tmp_path / OPEN_STREAMS_FILE
    if content is not None:
        now = int(time.time())
        fresh, stale = now - OPEN_STREAMS_LEASE_SECONDS + 2, now - OPEN_STREAMS_LEASE_SECONDS - 2
        path.write_text(content.format(now=now, fresh=fresh, stale=stale) + "\n")
    assert (run_test(path) == 0) is holds


def test_the_models_own_writer_writes_what_the_pre_stop_reads(tmp_path):
    model.write_count(str(tmp_path), 4, time.time())
    assert run_test(tmp_path / OPEN_STREAMS_FILE) == 0
    model.write_count(str(tmp_path), 0, time.time())
    assert run_test(tmp_path / OPEN_STREAMS_FILE) != 0
    assert [p.name for p in tmp_path.iterdir()] == [OPEN_STREAMS_FILE]  # no partial file left


# ------------------------------------------------------------------------------------- tritonserver


def stream_doc() -> dict[str, Any]:
    doc = example("streaming")
    doc["spec"]["routing"] = {"sessionAffinity": "Stream"}
    return doc


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
