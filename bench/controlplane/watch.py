"""Completion as the benchmark sees it: raw watches on a namespace, with the arrival time of each event."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonpipeline.kube.api_client import path
from tritonpipeline.settings import KIND

from .workload import API, CHILD_KINDS, api_client, now

PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class Recorder:
    """Raw watches (one thread per resource) on one namespace. Records the arrival time of the first
    event for every child (kind, name) and the first time each CR's status is written."""

    def __init__(self, kubeconfig: Path, namespace: str, with_crs: bool) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.cond = threading.Condition()
        self.seen: dict[tuple[str, str], float] = {}
        self.status: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.errors: list[str] = []
        self.events = 0
        self.lists: Counter[str] = Counter()  # 'LIST plural': this script's own list requests
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self._responses: list[Any] = []
        kinds = list(CHILD_KINDS) + ([(API, KIND)] if with_crs else [])
        for api_version, kind in kinds:
            t = threading.Thread(target=self._run, args=(api_version, kind), daemon=True)
            self.threads.append(t)
        self.ready = threading.Barrier(len(self.threads) + 1)

    def start(self) -> Recorder:
        for t in self.threads:
            t.start()
        self.ready.wait(30)
        return self

    def stop(self) -> None:
        self.stopping.set()
        for resp in list(self._responses):
            with contextlib.suppress(Exception):
                resp.response.shutdown()

    def _handle(self, kind: str, etype: str, obj: dict[str, Any], t: float) -> None:
        if etype == "DELETED":
            return
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        with self.cond:
            self.events += 1
            if kind == KIND:
                self.created.setdefault(name, t)
                st = obj.get("status") or {}
                conds = st.get("conditions") or []
                if (
                    name not in self.status
                    and st.get("observedGeneration") == meta.get("generation")
                    and any(c.get("type") == "SpecValid" for c in conds)
                ):
                    self.status[name] = t
                    self.cond.notify_all()
            elif (kind, name) not in self.seen:
                self.seen[(kind, name)] = t
                self.cond.notify_all()

    def _run(self, api_version: str, kind: str) -> None:
        api = api_client(self.kubeconfig, 2)
        url = path(api_version, kind, self.namespace)
        accept = "application/json" if kind == KIND else PARTIAL_METADATA
        rv: str | None = None
        first = True
        while not self.stopping.is_set():
            try:
                if rv is None:
                    list_accept = PARTIAL_METADATA_LIST if accept == PARTIAL_METADATA else accept
                    params = api.param_serialize(
                        method="GET", resource_path=url, header_params={"Accept": list_accept}
                    )
                    resp = api.call_api(*params, _request_timeout=30)
                    with self.cond:
                        self.lists[f"LIST {url.rsplit('/', 1)[1]}"] += 1
                    body = resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"list {kind}: HTTP {resp.status}: {body[:200]!r}")
                    listing = json.loads(body)
                    rv = listing["metadata"]["resourceVersion"]
                    t = now()
                    for item in listing.get("items") or []:
                        self._handle(kind, "ADDED", item, t)
                query = [
                    ("watch", "true"),
                    ("resourceVersion", rv),
                    ("allowWatchBookmarks", "true"),
                    ("timeoutSeconds", "300"),
                ]
                params = api.param_serialize(
                    method="GET", resource_path=url, query_params=query, header_params={"Accept": accept}
                )
                resp = api.call_api(*params, _request_timeout=None)
                if resp.status != 200:
                    raise RuntimeError(f"watch {kind}: HTTP {resp.status}: {resp.read()[:200]!r}")
                self._responses.append(resp)
                if first:
                    first = False
                    self.ready.wait(30)
                try:
                    rv = self._consume(kind, resp, rv)
                finally:
                    self._responses.remove(resp)
            except Exception as exc:  # a broken watch is re-opened from the last resourceVersion
                if self.stopping.is_set():
                    return
                if len(self.errors) < 50:
                    self.errors.append(f"{kind}: {exc!r}"[:300])
                time.sleep(0.2)

    def _consume(self, kind: str, resp: Any, rv: str | None) -> str | None:
        """Read one watch stream to its end; returns the last resourceVersion (None: re-list)."""
        buffer = bytearray()
        for segment in resp.response.stream(amt=None, decode_content=False):
            t = now()
            buffer.extend(segment)
            while (nl := buffer.find(b"\n")) != -1:
                line, buffer = bytes(buffer[:nl]), buffer[nl + 1 :]
                if not line.strip():
                    continue
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch {kind}: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if etype != "BOOKMARK":
                    self._handle(kind, etype, obj, t)
        return rv

    # -- queries (call with or without the lock; they take it) ----------------------------------------

    def children_time(self, keys: set[tuple[str, str]]) -> float | None:
        times = [self.seen.get(k) for k in keys]
        return None if any(t is None for t in times) else max(t for t in times if t is not None)

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        return wait_on(self.cond, predicate, timeout)


def wait_on(cond: threading.Condition, predicate: Callable[[], bool], timeout: float) -> bool:
    """Wait until `predicate` (called with `cond` held) is true, woken by `cond`'s notifications and
    every 0.5 s; False after `timeout` s."""
    deadline = time.monotonic() + timeout
    with cond:
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            cond.wait(min(left, 0.5))
        return True
