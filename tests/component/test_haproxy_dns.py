"""The consistent-hash proxy setup of routing.sessionAffinity Header, on real parts only: a real
kube-apiserver holds a headless Service and its EndpointSlice; real CoreDNS (kubernetes plugin) answers the
Service's name with the ready endpoints; real HAProxy finds its servers in that answer and hashes the
sequence header over them (`hash-type consistent`, what ingress-nginx's upstream-hash-by does), or sticks
each header value to its first server (a stick table); the endpoints are 3 real tritonservers serving
examples/streaming.yaml (a per-sequence running sum), each on its own address, same ports.

The apiserver refuses loopback addresses in an EndpointSlice (127.0.0.0/8), so the servers listen on
addresses of the benchmarking range 198.18.0.0/15 (RFC 2544, never routed) that the test adds to the
host's `lo` for the module and removes after it: traffic to them never leaves the loopback interface.

The facts a scaling bench relies on: every chunk of a sequence reaches one server while the set of ready
endpoints holds still; an endpoint marked not ready leaves HAProxy's rotation within seconds and only its
keys move (hash); a new ready endpoint takes some live keys away from the others (hash) but none at all
with the stick table; and a sequence in flight across such a change breaks exactly when its chunks
reach two servers (what the bench counts)."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import random
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import coredns
from harness.coredns import CoreDNS, missing_coredns, service_fqdn
from harness.haproxy import HAProxy, missing_haproxy
from harness.kubeapi import apply_object
from harness.wait import wait_for
from helpers import example
from tritonpipeline.client import DEFAULT_HEADER, AsyncTritonClient
from tritonpipeline.local.tritonserver import free_ports

pytestmark = [pytest.mark.apiserver, pytest.mark.haproxy, pytest.mark.tritonserver]

REPLICAS = 3
CHUNKS = 4
SERVICE = "streaming-headless"  # render/routing_objects.headless_name of the streaming example
PAUSE_AT = 2  # sequences in flight across a change of endpoints stop before this chunk
LEAVE_SECONDS = 5.0  # an endpoint marked not ready is out of HAProxy's rotation within this


@pytest.fixture(scope="module", autouse=True)
def _needs_haproxy_and_coredns() -> None:
    for reason in (missing_haproxy(), missing_coredns()):
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="module")
def lo_addresses() -> Iterator[list[str]]:
    """REPLICAS addresses 198.18.A.2, .3, ... (A random) added to `lo` as /32, removed at teardown."""
    ip = shutil.which("ip")
    if os.geteuid() != 0 or ip is None:
        pytest.skip(
            "adding addresses to lo needs root and iproute2's `ip` (the apiserver refuses 127/8 endpoints)"
        )
    present = subprocess.run([ip, "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    free = [n for n in range(256) if f" 198.18.{n}." not in present]
    subnet = random.choice(free)
    wanted = [str(ipaddress.ip_address(f"198.18.{subnet}.{i + 2}")) for i in range(REPLICAS)]
    added: list[str] = []
    try:
        for address in wanted:
            subprocess.run([ip, "addr", "add", f"{address}/32", "dev", "lo"], check=True, capture_output=True)
            added.append(address)
        yield wanted
    finally:
        for address in added:
            subprocess.run(
                [ip, "addr", "del", f"{address}/32", "dev", "lo"], check=False, capture_output=True
            )


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, lo_addresses: list[str]) -> Iterator[list[Any]]:
    """3 real tritonservers serving the compiled streaming example (CPU), one on each of lo_addresses,
    all on the same three ports, as pods of one Service are."""
    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.local.repository import write_repository
    from tritonpipeline.local.tritonserver import LocalTriton
    from tritonpipeline.spec import parse_pipeline

    tmp = tmp_path_factory.mktemp("replicas")
    tp = parse_pipeline(example("streaming"))
    artifacts = compile_pipeline(tp, cpu_only=True)
    http, grpc, metrics = free_ports(3)
    servers = []
    try:
        for i in range(REPLICAS):
            repo = write_repository(artifacts, tmp / f"repo{i}", Path(tp.spec.model_repository.uri))
            server = LocalTriton(
                repo,
                http_port=http,
                grpc_port=grpc,
                metrics_port=metrics,
                host=lo_addresses[i],
                log_file=tmp / f"triton{i}.log",
                extra_args=["--exit-timeout-secs=5"],
            )
            servers.append(server.start())
        for server in servers:
            server.wait_ready(timeout=120)
        yield servers
    finally:
        for server in servers:
            server.stop(timeout=15)


def endpoint_slice(namespace: str, servers: list[Any], ready: list[bool]) -> dict[str, Any]:
    """The EndpointSlice the endpointslice controller would write for the headless Service."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{SERVICE}-abcde",
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": "e2e",
            },
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [s.host], "conditions": {"ready": r, "serving": r, "terminating": False}}
            for s, r in zip(servers, ready, strict=True)
        ],
        "ports": [
            {"name": "http", "port": servers[0].http_port, "protocol": "TCP"},
            {"name": "grpc", "port": servers[0].grpc_port, "protocol": "TCP"},
        ],
    }


def set_ready(kube: Any, namespace: str, servers: list[Any], ready: list[bool]) -> None:
    apply_object(kube, endpoint_slice(namespace, servers, ready))


@pytest.fixture
def service(kube: Any, namespace: str, replicas: list[Any]) -> str:
    """The headless Service (no selector: its one EndpointSlice is written by the test), all 3 ready; its
    cluster DNS name."""
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {
                "clusterIP": "None",
                "ports": [
                    {"name": "http", "port": replicas[0].http_port, "protocol": "TCP"},
                    {"name": "grpc", "port": replicas[0].grpc_port, "protocol": "TCP"},
                ],
            },
        }
    )
    set_ready(kube, namespace, replicas, [True] * REPLICAS)
    return service_fqdn(SERVICE, namespace)


@pytest.fixture
def dns(control_plane: Any, kube: Any, tmp_path: Path) -> Iterator[CoreDNS]:
    """CoreDNS reading the apiserver as its own user, with only the read access its ClusterRole gives."""
    for obj in coredns.rbac_objects():
        apply_object(kube, obj)
    kubeconfig = control_plane.user_kubeconfig(coredns.USER)
    with CoreDNS(tmp_path / "coredns", kubeconfig, ttl=1) as server:
        yield server


def proxy(tmp_path: Path, dns: CoreDNS, fqdn: str, replicas: list[Any], flavour: str = "hash") -> HAProxy:
    return HAProxy(
        tmp_path / f"haproxy-{flavour}",
        dns.address,
        fqdn,
        flavour=flavour,  # type: ignore[arg-type]
        slots=REPLICAS + 1,
        backend_http_port=replicas[0].http_port,
        backend_grpc_port=replicas[0].grpc_port,
    )


def addresses(servers: list[Any], port: str = "http_port") -> set[str]:
    return {f"{s.host}:{getattr(s, port)}" for s in servers}


def accumulator_requests(server: Any) -> int:
    """nv_inference_request_success of the stateful model on one replica (its /metrics)."""
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    m = re.search(r'^nv_inference_request_success\{model="accumulator",version="1"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else 0


@dataclass
class Outcome:
    right: int = 0
    broken: set[int] = field(default_factory=set)  # ids with a wrong running total or a refused chunk
    samples: list[str] = field(default_factory=list)


async def run_sequences(
    url: str, protocol: str, ids: list[int], seed: int, between: Callable[[], None] | None = None
) -> Outcome:
    """One sequence of CHUNKS chunks per id, all at once, interleaved; each checks every running total.
    With `between`: every sequence stops before chunk PAUSE_AT (in flight, its state on one server),
    `between()` runs (in a thread), then they all go on. At most 8 sequences may wait on one server
    (the accumulator's sequence slots): a 9th would wait for a slot and never reach the pause."""
    rng = random.Random(seed)
    plans = {i: [rng.randint(-50, 50) for _ in range(CHUNKS)] for i in ids}
    outcome = Outcome()
    limits = {"conn_limit": len(ids) + 8} if protocol == "http" else {}
    client = AsyncTritonClient(url, protocol=protocol, header=DEFAULT_HEADER, **limits)
    paused: list[int] = []
    everyone_paused, go_on = asyncio.Event(), asyncio.Event()

    async def sequence(seq_id: int) -> None:
        expected, ok = 0.0, True
        for k, code in enumerate(plans[seq_id]):
            if between is not None and k == PAUSE_AT:
                paused.append(seq_id)
                if len(paused) == len(ids):
                    everyone_paused.set()
                await go_on.wait()
            await asyncio.sleep(rng.uniform(0, 0.01))
            expected += code / 2
            chunk = client.input("CHUNK", np.array([[code]], dtype=np.int32))
            try:
                result = await client.infer(
                    "streaming",
                    [chunk],
                    sequence_id=seq_id,
                    sequence_start=k == 0,
                    sequence_end=k == CHUNKS - 1,
                )
                got = float(result.as_numpy("TOTAL")[0, 0])
            except Exception as exc:
                got, problem = float("nan"), str(exc)[:160]
            else:
                problem = f"total {got}, expected {expected}"
            if not abs(got - expected) <= 1e-3:
                if ok and len(outcome.samples) < 6:
                    outcome.samples.append(f"sequence {seq_id} chunk {k}: {problem}")
                ok = False
        outcome.right += ok
        if not ok:
            outcome.broken.add(seq_id)

    async def pause() -> None:
        if between is not None:
            await asyncio.wait_for(everyone_paused.wait(), 30)
            await asyncio.to_thread(between)
            go_on.set()

    try:
        await asyncio.wait_for(asyncio.gather(pause(), *(sequence(i) for i in ids)), 120)
    finally:
        await client.close()
    return outcome


def owners(lb: HAProxy, ids: list[int], backend: str = "triton_http", since: int = 0) -> dict[int, str]:
    """Each id's one server from HAProxy's log, from byte `since` on (fails when an id reached two)."""
    seen = lb.served_by_key(backend, since)
    assert all(len(seen.get(str(i), ())) == 1 for i in ids), {i: seen.get(str(i)) for i in ids}
    return {i: next(iter(seen[str(i)])) for i in ids}


def test_coredns_answers_the_ready_endpoints_of_the_headless_service(kube, namespace, replicas, service, dns):
    every = sorted(s.host for s in replicas)
    assert wait_for("all 3 endpoints in DNS", lambda: dns.resolve(service) == every, timeout=10)
    set_ready(kube, namespace, replicas, [False, True, True])
    began = time.monotonic()
    wait_for("the not-ready endpoint out of DNS", lambda: dns.resolve(service) == every[1:], timeout=10)
    print(f"\nnot-ready endpoint out of CoreDNS's answer after {time.monotonic() - began:.1f}s")
    assert dns.resolve(f"nothing.{namespace}.svc.cluster.local") == []


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("flavour", ["hash", "stick"])
def test_every_sequence_stays_on_one_server(tmp_path, replicas, service, dns, flavour, protocol):
    ids = list(range(5_000, 5_090))
    before = [accumulator_requests(s) for s in replicas]
    with proxy(tmp_path, dns, service, replicas, flavour) as lb:
        backend = "triton_http" if protocol == "http" else "triton_grpc"
        port = "http_port" if protocol == "http" else "grpc_port"
        lb.wait_active(addresses(replicas, port), backend)
        outcome = asyncio.run(
            run_sequences(lb.http_url if protocol == "http" else lb.grpc_url, protocol, ids, 1)
        )
        assert outcome.right == len(ids), outcome.samples
        served = owners(lb, ids, backend)
        proxied = {s["addr"]: int(s["req_tot"]) for s in lb.servers(backend) if s["addr"]}
    per_server = [accumulator_requests(s) - b for s, b in zip(replicas, before, strict=True)]
    print(
        f"\n{flavour}/{protocol}: {outcome.right} right of {len(ids)}; "
        f"accumulator requests per server {per_server}, HAProxy's count {proxied}"
    )
    assert sum(per_server) == len(ids) * CHUNKS
    # the proxy's own per-server request counts (stats socket) agree with each tritonserver's /metrics
    assert proxied == {f"{s.host}:{getattr(s, port)}": n for s, n in zip(replicas, per_server, strict=True)}
    assert len(set(served.values())) == REPLICAS  # spread over all three, each sequence on one
    assert all(n >= len(ids) * CHUNKS // 10 for n in per_server), per_server


@pytest.mark.parametrize("flavour", ["hash", "stick"])
def test_a_not_ready_endpoint_leaves_and_only_its_keys_move(
    tmp_path, kube, namespace, replicas, service, dns, flavour
):
    """Scale-down: mark replica 0 not ready; within LEAVE_SECONDS HAProxy stops using it; the same keys
    sent again all come back right, replica 0 gets none of them, each of its keys moved to one other
    server and the keys of the other two did not move. Marked ready again, it rejoins as fast and takes
    new keys; with the stick table no placed key moves to it."""
    ids = list(range(6_000, 6_090))
    with proxy(tmp_path, dns, service, replicas, flavour) as lb:
        lb.wait_active(addresses(replicas))
        first = asyncio.run(run_sequences(lb.http_url, "http", ids, 2))
        assert first.right == len(ids), first.samples
        home = owners(lb, ids)
        gone = f"{replicas[0].host}:{replicas[0].http_port}"
        assert gone in home.values()

        set_ready(kube, namespace, replicas, [False, True, True])
        began = time.monotonic()
        lb.wait_active(addresses(replicas[1:]), timeout=LEAVE_SECONDS)
        left_after = time.monotonic() - began
        before, mark = accumulator_requests(replicas[0]), lb.log_mark()
        second = asyncio.run(run_sequences(lb.http_url, "http", ids, 3))
        assert second.right == len(ids), second.samples
        reached_gone = accumulator_requests(replicas[0]) - before
        moved_to = owners(lb, ids, since=mark)

        set_ready(kube, namespace, replicas, [True] * REPLICAS)
        began = time.monotonic()
        lb.wait_active(addresses(replicas), timeout=LEAVE_SECONDS)
        joined_after = time.monotonic() - began
        mark = lb.log_mark()
        new_ids = list(range(6_100, 6_190))
        third = asyncio.run(run_sequences(lb.http_url, "http", ids + new_ids, 4))
        assert third.right == len(ids) * 2, third.samples
        rejoined = owners(lb, ids + new_ids, since=mark)
    moved = {i for i in ids if moved_to[i] != home[i]}
    taken = {i for i in ids if rejoined[i] != moved_to[i]}
    back = sum(home[i] == gone for i in taken)
    print(
        f"\n{flavour}: replica 0 out of rotation {left_after:.1f}s after it was marked not ready; "
        f"{len(moved)} of {len(ids)} keys moved ({sum(home[i] == gone for i in ids)} were on replica 0); "
        f"back in rotation {joined_after:.1f}s after ready again; {len(taken)} placed keys moved to it, "
        f"{back} of them its old ones"
    )
    assert reached_gone == 0  # nothing more reached the not-ready replica
    assert moved == {i for i in ids if home[i] == gone}  # exactly its keys moved
    assert gone in {rejoined[i] for i in new_ids}  # back in rotation, it takes new keys
    assert all(rejoined[i] == gone for i in taken)  # placed keys move only to the rejoining server
    if flavour == "stick":
        assert not taken  # the stick table keeps every live key where it is


@pytest.mark.parametrize("flavour", ["hash", "stick"])
def test_a_new_ready_endpoint_moves_live_keys_only_with_hashing(
    tmp_path, kube, namespace, replicas, service, dns, flavour
):
    """Scale-up: 2 ready endpoints, then the third becomes ready. Hash: some of the keys already placed
    move to the new server (a sequence in flight there would break). Stick: none moves."""
    ids = list(range(7_000, 7_090))
    set_ready(kube, namespace, replicas, [True, True, False])
    with proxy(tmp_path, dns, service, replicas, flavour) as lb:
        lb.wait_active(addresses(replicas[:2]))
        first = asyncio.run(run_sequences(lb.http_url, "http", ids, 4))
        assert first.right == len(ids), first.samples
        home = owners(lb, ids)

        set_ready(kube, namespace, replicas, [True, True, True])
        lb.wait_active(addresses(replicas), timeout=LEAVE_SECONDS)
        mark = lb.log_mark()
        new_ids = list(range(8_000, 8_090))
        second = asyncio.run(run_sequences(lb.http_url, "http", ids + new_ids, 5))
        assert second.right == len(ids) * 2, second.samples
        after = owners(lb, ids + new_ids, since=mark)
    moved = {i for i in ids if after[i] != home[i]}
    joined = f"{replicas[2].host}:{replicas[2].http_port}"
    print(f"\n{flavour}: a third endpoint joined; {len(moved)} of {len(ids)} placed keys moved")
    assert joined in {after[i] for i in new_ids}  # the new server takes new keys in both flavours
    if flavour == "hash":
        assert moved, "consistent hashing moved no key when a server joined"
        assert all(after[i] == joined for i in moved)  # each moved to the new server only
    else:
        assert not moved, {i: after[i] for i in moved}


@pytest.mark.parametrize("flavour", ["hash", "stick"])
@pytest.mark.parametrize("change", ["join", "leave"])
def test_sequences_in_flight_across_a_change_of_endpoints(
    tmp_path, kube, namespace, replicas, service, dns, flavour, change
):
    """What the scaling bench counts: sequences in flight while the ready endpoints change. Each of 10
    sequences sends PAUSE_AT chunks, then an endpoint joins (2 -> 3 ready) or leaves (3 -> 2), then the
    rest. A sequence breaks (refused: the new server never saw its START) exactly when its chunks
    reached two servers: on a join, with hashing only; on a leave, the leaving server's, both flavours."""
    ids = list(range(9_000, 9_010))
    before = [True, True, False] if change == "join" else [True] * REPLICAS
    after = [True] * REPLICAS if change == "join" else [False, True, True]
    set_ready(kube, namespace, replicas, before)
    with proxy(tmp_path, dns, service, replicas, flavour) as lb:
        lb.wait_active(addresses([s for s, on in zip(replicas, before, strict=True) if on]))

        def change_endpoints() -> None:
            set_ready(kube, namespace, replicas, after)
            ready = [s for s, on in zip(replicas, after, strict=True) if on]
            lb.wait_active(addresses(ready), timeout=LEAVE_SECONDS)

        outcome = asyncio.run(run_sequences(lb.http_url, "http", ids, 7, between=change_endpoints))
        served = lb.served_by_key()
    split = {i for i in ids if len(served[str(i)]) > 1}
    print(
        f"\n{flavour}, an endpoint {'joined' if change == 'join' else 'left'} mid-sequence: "
        f"{len(outcome.broken)} of {len(ids)} sequences broke, e.g. {outcome.samples[:1]}"
    )
    assert outcome.broken == split  # broken exactly when its chunks reached two servers
    changed = f"{replicas[2 if change == 'join' else 0].host}:{replicas[0].http_port}"
    if change == "join" and flavour == "stick":
        assert not split
    elif change == "join":
        assert split and all(changed in served[str(i)] for i in split)
    else:
        assert split and split == {i for i in ids if changed in served[str(i)]}
