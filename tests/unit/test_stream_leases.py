"""With `routing.sessionAffinity: Stream` a leaving pod waits only for the streams the client helper
registered with the generated open-streams model (compiler/open_streams_model.py): the model's lease
bookkeeping and the preStop's test of its count file. On a real tritonserver:
tests/component/test_stream_leases.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.stream_leases import run_test, stream_doc
from tritonpipeline import client
from tritonpipeline.compiler import (
    OPEN_STREAMS_FILE,
    OPEN_STREAMS_GAUGE,
    OPEN_STREAMS_LEASE_SECONDS,
    OPEN_STREAMS_MODEL,
)
from tritonpipeline.compiler import open_streams_model as model
from tritonpipeline.compiler.triton_config import open_streams_config
from tritonpipeline.render import autoscaling_objects
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
