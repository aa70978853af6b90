"""Compiles in worker processes (issue 54 point 3): a tenant's pipeline is parsed, compiled and checked
in a process of its own, never on the operator's event loop or under its GIL, so one tenant's large
specs and dry-run storms cost the others a turn at a worker at most.

- `Workers` runs `verdict` (the webhook's parse + compile + checks), `reach_items` (the access
  review's: only the few items come back) and `compile_cr` (the reconcile's) in `compile_workers`
  spawned processes, shared fairly between namespaces with at most
  `compiles_per_namespace` of them for one namespace (runtime/fairness.py).
- A compile that takes longer than `compile_timeout_seconds` is ended with its process and the pipeline
  refused (COMPILE_TOO_LONG), and so is one that needs more memory than WORKER_DATA_BYTES
  (COMPILE_TOO_BIG); a worker that dies (killed for memory, say) is replaced and the compile
  tried once more in a fresh one, then refused (WORKER_ENDED). A worker whose peak memory passed
  WORKER_RECYCLE_BYTES is replaced after its compile, so one huge spec does not keep its memory.
- A namespace whose compiles took much CPU lately (HEAVY_CPU_SECONDS) compiles in a lane of its own, a
  worker at the lowest CPU priority: a tenant's storm of large specs gets only the CPU the operator and
  the other tenants' compiles leave.
- The webhook's verdicts and the access review's items are kept by what they depend on (`essence`): a
  storm of the same dry run compiles once.

With `compile_workers` 0 (the bare operator's default; the chart runs 2) the same functions run in
threads of the operator's own process. This module imports no kopf: a worker loads only the parser,
the compiler and the renderers (42 MB, not the operator's 80)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import logging
import multiprocessing.connection
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ..errors import Problem, SpecError
from ..render import reach as rc
from ..render.checks import Verdict, validate
from ..render.manifests import Children, render_children
from ..render.routing_objects import needs_gateway_lookup
from ..settings import GROUP, Settings
from ..spec import TritonPipeline
from . import log_events as events
from .cache import BoundedCache
from .fairness import FairShare

T = TypeVar("T")
log = logging.getLogger(__name__)

COMPILE_TOO_LONG = (
    "took longer than {seconds:g}s to compile (the operator's TRITONPIPELINE_COMPILE_TIMEOUT_SECONDS); "
    "split the pipeline, or ask an admin to raise the bound"
)
COMPILE_TOO_BIG = (
    "needs more than {mib} MiB of memory to compile (the operator's bound for one pipeline); split the "
    "pipeline"
)
WORKER_ENDED = "could not be compiled: the compile worker ended ({why}) twice; see the operator's log"
# a worker whose peak RSS passed this is replaced after its compile (measured: 42 MB loaded, a peak of
# 65 MB after compiling a 0.64 MB spec)
WORKER_RECYCLE_BYTES = 256 * 1024 * 1024
# the most data memory a worker may map (RLIMIT_DATA: 28 MB loaded): a compile that needs more is refused
# (COMPILE_TOO_BIG) and the worker replaced, whatever the pod's own limit
WORKER_DATA_BYTES = 384 * 1024 * 1024
VERDICT_CACHE_BYTES = 8 * 1024 * 1024  # the webhook's verdicts kept (estimated: `_weight`)
IN_PROCESS_THREADS = 2  # compile_workers 0: the threads compiles run in
# A namespace whose compiles took more than HEAVY_CPU_SECONDS of CPU lately (halved every
# USAGE_HALF_LIFE_SECONDS) compiles in the heavy lane: HEAVY_WORKERS processes at nice HEAVY_NICE, which
# get the CPU only when the other workers and the operator leave it (a 0.9 MB spec takes ~1 s here, an
# example's 20 ms: a storm of large specs is heavy after a few, a team's applies never)
HEAVY_CPU_SECONDS = 4.0
USAGE_HALF_LIFE_SECONDS = 30.0
HEAVY_WORKERS = 1
HEAVY_NICE = 19
READY = "ready"  # what a worker sends once it has loaded
WORKER_START_SECONDS = 60.0  # the longest a worker may take to load (a second or two; more when busy)


# ------------------------------------------------------------------------------ what workers run


def verdict(doc: Mapping[str, Any], settings: Settings | None = None) -> Verdict:
    """The admission webhook's verdict: `validate` of a stored object (render/checks.py: a field of a
    newer CRD, which the API server's pruning left, is a warning), without the pipeline and artifacts
    (what a worker sends back is small)."""
    return validate(doc, settings, stored=True).bare()


@dataclass(frozen=True)
class Generated:
    """What a reconcile reports of the generated repository (the compiled plan itself is not kept)."""

    graph: dict[str, Any]  # Artifacts.graph_summary()
    digest: str
    files: int


Compiled = tuple[TritonPipeline, Generated, Children, list[str]]


def compile_cr(body: dict[str, Any], config: Settings) -> Compiled:
    """Parse, compile and render a pipeline (pure; raises SpecError): the spec, what the generated
    repository is, the children, and the fields of a newer CRD the parse left out (SchemaCurrent)."""
    checked = validate(body, config, stored=True)  # the webhook's and the CLI's check, the same
    tp, artifacts = checked.valid()
    generated = Generated(artifacts.graph_summary(), artifacts.digest(), len(artifacts.files))
    return tp, generated, render_children(tp, artifacts, config), checked.newer


def reach_items(body: dict[str, Any], config: Settings) -> list[rc.Reach] | None:
    """What the access review asks about a pipeline (reconcile/authors.py): the items it reaches once
    rendered (render/reach.py), the required ones, then those of the ScaledObject an `auto` engine may
    get, marked optional. Computed where it compiles, so that only these few items come back: a 0.9 MB
    spec's rendered children are 4.6 MB pickled, and walking them held the event loop for 0.2 s. None
    when its routing needs its Gateway's implementation read from the cluster first (the operator
    renders that one itself). Raises SpecError."""
    tp, _, children, _ = compile_cr(body, config)
    if needs_gateway_lookup(tp):
        return None
    spec = body.get("spec") or {}
    required = rc.reach(tp, children, config, spec)
    return [*required, *rc.optional_reach(tp, config, spec, required)]


def essence(doc: Mapping[str, Any], *, owned: bool = True) -> tuple[str, int]:
    """What a pipeline's verdict or compilation depends on (its spec, name, namespace, labels and
    annotations), as a digest, and the size of what was digested. `owned=False` leaves out the
    operator's own annotations (`<GROUP>/...`: kopf's progress, the roll request, the access review's
    record), which a reconcile's compilation does not depend on; the webhook's verdict keeps them (the
    annotations' size is checked)."""
    meta = doc.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    if not owned:
        annotations = {k: v for k, v in annotations.items() if not k.startswith(f"{GROUP}/")}
    labels = dict(meta.get("labels") or {})
    text = json.dumps(
        [doc.get("spec"), meta.get("name"), meta.get("namespace"), labels, annotations],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest(), len(text)


# ------------------------------------------------------------------------------------ the workers


def peak_rss() -> int:
    """This process's own peak resident memory in bytes: VmHWM, of its address space since it started
    its program. Not getrusage's ru_maxrss, which Linux keeps across exec: a worker spawned by an
    operator of 300 MB would read 300 MB before compiling anything, and be replaced after every
    compile (WORKER_RECYCLE_BYTES). ru_maxrss only where /proc has no VmHWM."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def serve_on(fd: int, data_bytes: int = 0) -> None:
    """A worker's life, on its end of the socket pair `fd`: run each (function, arguments) it is sent
    and send back (ok, value, peak RSS in bytes, CPU seconds it took); it ends when the operator closes
    its end (or goes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the operator's to handle
    if data_bytes:  # a compile that needs more raises MemoryError: a refusal, not the pod's OOM kill
        resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))
    # if the pod's memory runs out all the same, a worker goes first
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    conn = multiprocessing.connection.Connection(fd)
    with contextlib.suppress(EOFError, OSError):  # the operator went (or closed this end): end quietly
        conn.send(READY)  # loaded: the compile timeout counts from here
        while True:
            fn, args = conn.recv()
            started = time.process_time()
            try:
                reply: tuple[bool, Any] = (True, fn(*args))
            except Exception as exc:  # RecursionError and MemoryError included: the compile's verdict
                reply = (False, exc)
            used = (peak_rss(), time.process_time() - started)
            try:
                conn.send((*reply, *used))
            except (EOFError, OSError):
                raise
            except Exception as exc:  # an exception that does not pickle
                conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}"), *used))


class CompileStopped(SpecError):
    """A compile stopped at a bound (COMPILE_TOO_LONG, WORKER_ENDED): a refusal not remembered, since it
    may not recur."""


class WorkerEnded(Exception):
    """The worker process ended during a compile (killed for memory, say)."""


class CompileTooLong(Exception):
    """A compile ran past the timeout; its worker was ended."""


class Worker:
    """One worker process (`python -c`, not multiprocessing's spawn: that would run the operator's main
    module again), talked to over a socket pair; one compile at a time, driven from one thread."""

    def __init__(self, nice: int = 0) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            start = f"serve_on({theirs.fileno()}, {WORKER_DATA_BYTES})"
            code = f"import os; os.nice({nice}); from {__name__} import serve_on; {start}"
            self.process = subprocess.Popen(
                [sys.executable, "-c", code], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL
            )
        self.conn = multiprocessing.connection.Connection(ours.detach())
        self.retired = self.ready = False
        self.spent = 0.0  # the CPU seconds of its last call (the timeout when it ran past it)

    def call(self, fn: Callable[..., T], args: tuple[Any, ...], timeout: float) -> T:
        """fn(*args) in the worker; its exception raised here. Raises CompileTooLong (the worker ended)
        or WorkerEnded."""
        try:
            if not self.ready:
                if not self.conn.poll(WORKER_START_SECONDS) or self.conn.recv() != READY:
                    raise EOFError()
                self.ready = True
            self.conn.send((fn, args))
            if not self.conn.poll(timeout):
                self.spent = timeout
                self.end()
                raise CompileTooLong()
            ok, value, peak, self.spent = self.conn.recv()
        except (EOFError, OSError):
            self.end()
            raise WorkerEnded(f"exit code {self.process.returncode}") from None
        if peak > WORKER_RECYCLE_BYTES or isinstance(value, MemoryError):
            self.end()  # after a MemoryError what it holds is not to be trusted
        if not ok:
            raise value
        return cast(T, value)

    def end(self) -> None:
        """Kill the process (a compile may be under way) and reap it."""
        self.retired = True
        self.conn.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class Workers:
    """The compile workers of one operator (shared by every memo: kopf copies the state shallowly)."""

    def __init__(self, settings: Settings | None = None) -> None:
        """In-process threads until `configure` (the operator's start-up) sizes the pool."""
        self.configure(settings or Settings(compile_workers=0))
        self.verdicts = BoundedCache(VERDICT_CACHE_BYTES)

    def configure(self, settings: Settings) -> None:
        """Size the pool and its bounds from the settings (before the first compile)."""
        self.processes, self.timeout = settings.compile_workers, settings.compile_timeout_seconds
        places = self.processes or IN_PROCESS_THREADS
        self.turns = FairShare(places, settings.compiles_per_namespace)
        self.heavy_turns = FairShare(HEAVY_WORKERS)  # the heavy namespaces' lane, shared fairly
        self._threads = concurrent.futures.ThreadPoolExecutor(
            places + HEAVY_WORKERS, thread_name_prefix="compile"
        )
        self._idle: dict[bool, list[Worker]] = {False: [], True: []}  # by lane: heavy or not
        self.usage: dict[str, tuple[float, float]] = {}  # namespace -> (CPU seconds, decayed at)

    def start(self) -> None:
        """Start the processes now (each takes a second or two to load), not at the first compile. The
        heavy lane's worker starts when a namespace first needs it."""
        while len(self._idle[False]) < self.processes:
            self._idle[False].append(Worker())

    def close(self) -> None:
        for lane in self._idle.values():
            while lane:
                lane.pop().end()

    def used(self, namespace: str, seconds: float = 0.0) -> float:
        """`namespace`'s compile CPU seconds, decayed by half every USAGE_HALF_LIFE_SECONDS, with
        `seconds` more."""
        at = time.monotonic()
        before, then = self.usage.get(namespace, (0.0, at))
        total = before * 0.5 ** ((at - then) / USAGE_HALF_LIFE_SECONDS) + seconds
        if total < 0.01:
            self.usage.pop(namespace, None)
        else:
            self.usage[namespace] = (total, at)
        return total

    async def run(self, fn: Callable[..., T], doc: Mapping[str, Any], *args: Any) -> T:
        """fn(doc, *args) in a worker (in a thread with compile_workers 0), in `doc`'s namespace's turn:
        in the heavy lane (a worker of the lowest CPU priority) while the namespace's recent compiles
        took more than HEAVY_CPU_SECONDS. A compile past the timeout raises CompileStopped
        (COMPILE_TOO_LONG), and so does a worker that ends twice (WORKER_ENDED); both are logged
        (COMPILE_STOPPED)."""
        meta = doc.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        loop = asyncio.get_running_loop()
        if not self.processes:
            async with self.turns.of(namespace):
                return await loop.run_in_executor(self._threads, fn, doc, *args)
        heavy = self.used(namespace) > HEAVY_CPU_SECONDS
        async with (self.heavy_turns if heavy else self.turns).of(namespace):
            for attempt in (1, 2):
                idle = self._idle[heavy]
                worker = idle.pop() if idle else Worker(HEAVY_NICE if heavy else 0)
                done = loop.run_in_executor(self._threads, worker.call, fn, (doc, *args), self.timeout)
                done.add_done_callback(functools.partial(self._returned, worker, heavy))
                try:
                    return await _unless_cancelled(done)
                except CompileTooLong:
                    message = COMPILE_TOO_LONG.format(seconds=self.timeout)
                except MemoryError:
                    message = COMPILE_TOO_BIG.format(mib=WORKER_DATA_BYTES // (1024 * 1024))
                except WorkerEnded as exc:
                    if attempt == 1:
                        continue
                    message = WORKER_ENDED.format(why=exc)
                finally:
                    self.used(namespace, worker.spent)
                events.COMPILE_STOPPED.log(log, namespace=namespace, name=meta.get("name"), why=message)
                raise CompileStopped([Problem("spec", message)])
        raise AssertionError("unreachable")

    def _returned(self, worker: Worker, heavy: bool, _: object) -> None:
        if not worker.retired:
            self._idle[heavy].append(worker)

    async def verdict(self, doc: Mapping[str, Any], settings: Settings | None) -> Verdict:
        """The webhook's verdict on `doc`, from the cache when an identical one was reviewed."""
        tag = essence(doc)[0]
        known: Verdict | None = self.verdicts.get(tag, tag)
        if known is None:
            try:
                known = await self.run(verdict, dict(doc), settings)
            except CompileStopped as exc:  # not kept: it may pass with a busy moment
                return Verdict(exc.problems)
            self.verdicts.put(tag, tag, known, _weight(known))
        return known

    async def reach_items(self, doc: Mapping[str, Any], settings: Settings) -> list[rc.Reach] | None:
        """`reach_items` of `doc` in a worker, kept by essence as the verdicts are (a storm of the same
        dry run compiles once). Raises SpecError: a refusal is kept, a CompileStopped is not."""
        tag = f"reach:{essence(doc)[0]}"
        known: _Reached | None = self.verdicts.get(tag, tag)
        if known is None:
            try:
                known = _Reached(await self.run(reach_items, dict(doc), settings))
            except CompileStopped:
                raise
            except SpecError as exc:
                known = _Reached(None, exc)
            self.verdicts.put(tag, tag, known, known.weight())
        if known.error is not None:
            raise known.error
        return known.items


@dataclass(frozen=True)
class _Reached:
    """A kept `reach_items`: its items, or the SpecError it raised."""

    items: list[rc.Reach] | None
    error: SpecError | None = None

    def weight(self) -> int:
        """Estimated bytes: a little for the key, each item's texts, or the refusal's messages."""
        problems = self.error.problems if self.error is not None else []
        texts = [len(i.key) + len(i.field) + len(i.detail) for i in self.items or []]
        return 256 + sum(texts) + 64 * len(texts) + sum(len(p.path) + len(p.message) + 64 for p in problems)


def _weight(result: Verdict) -> int:
    """A verdict's estimated bytes: its messages, and a little for its key."""
    return 256 + sum(len(p.path) + len(p.message) + 64 for p in (*result.problems, *result.warnings))


async def _unless_cancelled(done: asyncio.Future[T]) -> T:
    """`done`'s result; a cancelled caller still waits for it (bounded by the timeout), so the place it
    holds is not handed on while its worker still compiles."""
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.wait([done])
        raise
