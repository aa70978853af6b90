"""Triton clients that keep every request of a sequence on one replica.

Triton carries `sequence_id` only inside the request body, where no load balancer looks. These wrappers
around tritonclient (sync and asyncio, HTTP and gRPC) copy it into a header, by default
`x-triton-sequence-id`, that the pipeline's routing hashes on (`spec.routing.sessionAffinity: Header`):
an HTTP header for HTTP, request metadata for gRPC (gRPC metadata travels as HTTP/2 headers, so the same
proxy rule covers both).

    from tritonpipeline.client import AsyncTritonClient

    async with AsyncTritonClient("triton.example.com:80", protocol="http") as client:
        chunk = client.input("CHUNK", np.array([[4]], dtype=np.int32))
        result = await client.infer("streaming", [chunk], sequence_id=42, sequence_start=True)
        total = result.as_numpy("TOTAL")

A request with no sequence (stateless) that finds its pooled HTTP connection closed by the server before
an answer came is sent once more, on a new connection: a pod leaving (a rollout, a scale-down) closes the
keep-alive connections clients still hold to it, after its endpoint is already gone; the new connection
reaches a pod that stays. Requests of a sequence are never resent (a model's state would see it twice).

With `spec.routing.sessionAffinity: Stream` (recommended for sequences) a sequence is one gRPC stream on a
connection of its own, `SequenceStream`: the Service picks a pod when the connection opens and every chunk
follows it, so pods added later never see it and a leaving pod serves it to its end (the pod waits while a
stream registered by this helper is open: see SequenceStream). No header and no proxy rule are needed:

    from tritonpipeline.client import SequenceStream

    async with SequenceStream("streaming.ns.svc:8001", "streaming") as seq:
        for i, code in enumerate(codes):
            chunk = seq.input("CHUNK", np.array([[code]], dtype=np.int32))
            total = (await seq.send([chunk], end=i == len(codes) - 1)).as_numpy("TOTAL")

Everything else is tritonclient's own API: `infer` takes its keyword arguments and returns its
InferResult, and `.raw` is the underlying InferenceServerClient.

The pipeline's administrative APIs (logging, trace, shared memory, model repository and config,
statistics) answer only requests that carry its admin key (docs/concepts/security.md). Give it as `admin_key`
and call them through `.admin`, which adds the header (HTTP) or metadata (gRPC) to every call:

    client = TritonClient(url, protocol="http", admin_key=read_key("/path/to/admin-key"))
    client.admin.update_log_settings({"log_verbose_level": 1})
"""

from __future__ import annotations

import secrets
import weakref
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

from .extras import MissingExtra, load, missing_message

try:
    import numpy as np
except ModuleNotFoundError as exc:
    raise MissingExtra(missing_message("client", exc.name or "numpy", "tritonpipeline.client")) from exc

from .triton.security import headers as key_headers
from .triton.security import read_key

__all__ = [
    "DEFAULT_HEADER",
    "AsyncTritonClient",
    "SequenceBroken",
    "SequenceStream",
    "TritonClient",
    "affinity_headers",
    "read_key",
]

DEFAULT_HEADER = "x-triton-sequence-id"
Protocol = Literal["http", "grpc"]


def no_sequence(sequence_id: int | str | None) -> bool:
    """A request outside any sequence (0, "" or None, as in Triton): stateless, so serving it twice
    changes nothing (it may be resent after a lost connection)."""
    return sequence_id is None or sequence_id == 0 or sequence_id == ""


# what a header value carries as it is: printable ASCII but '%' (the escape) and the space (trimmed at the
# ends of a value)
HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def affinity_headers(
    headers: Mapping[str, str] | None, header: str | None, sequence_id: int | str | None
) -> dict[str, str] | None:
    """`headers` plus the affinity header carrying `sequence_id` (header None sends none); a string ID
    percent-encoded where a header value could not carry it whole (non-ASCII, spaces, control characters,
    '%'), so that two IDs never share a value. A request with no sequence (0, "" or None, as in Triton)
    gets a random key instead: ingress-nginx hashes a missing header as the empty string, which would
    send every such request to one replica. gRPC metadata keys must be lowercase; HTTP header names are
    case-insensitive."""
    if header is None:
        return dict(headers) if headers else None
    key = secrets.token_hex(8) if no_sequence(sequence_id) else quote(str(sequence_id), safe=HEADER_SAFE)
    return {**(headers or {}), header.lower(): key}


def _modules(protocol: str, asynchronous: bool) -> tuple[Any, Any]:
    """(client module, module holding InferInput/InferRequestedOutput) for a protocol."""
    if protocol in ("http", "grpc"):
        base = load(f"tritonclient.{protocol}", "client", "tritonpipeline.client")
        if asynchronous:
            return load(f"tritonclient.{protocol}.aio", "client", "tritonpipeline.client"), base
        return base, base
    raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")


def _lost_connection_errors(protocol: str, asynchronous: bool) -> tuple[type[BaseException], ...]:
    """What the HTTP client raises when the server closed the connection without answering."""
    if protocol != "http":
        return ()  # gRPC: the channel reconnects itself when a server goes away (GOAWAY)
    if asynchronous:
        import aiohttp

        return (aiohttp.ServerDisconnectedError, ConnectionResetError, BrokenPipeError)
    from geventhttpclient.response import HTTPConnectionClosed

    return (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError)


class _Admin:
    """The raw client's methods with the admin key added to their `headers` (never shown in a repr)."""

    def __init__(self, raw: Any, key_headers: dict[str, str]) -> None:
        self._raw = raw
        self._headers = key_headers

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._raw, name)
        if not callable(method):
            return method

        def call(*args: Any, headers: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
            return method(*args, headers={**(headers or {}), **self._headers}, **kwargs)

        return call

    def __repr__(self) -> str:
        return f"<admin calls of {type(self._raw).__module__}.{type(self._raw).__name__}>"


class _Client:
    _asynchronous = False

    def __init__(
        self,
        url: str,
        *,
        protocol: Protocol = "grpc",
        header: str | None = DEFAULT_HEADER,
        admin_key: str | None = None,
        **client_args: Any,
    ) -> None:
        module, self._types = _modules(protocol, self._asynchronous)
        self._lost = _lost_connection_errors(protocol, self._asynchronous)
        self.protocol = protocol
        self.header = header
        self.raw = module.InferenceServerClient(url, **client_args)
        self._admin_key = admin_key

    @property
    def admin(self) -> Any:
        """The raw client's calls carrying the admin key. Raises ValueError when no key was given."""
        if not self._admin_key:
            raise ValueError("no admin_key given: the administrative APIs need the pipeline's admin key")
        return _Admin(self.raw, key_headers(self._admin_key, self.protocol))

    def input(self, name: str, array: np.ndarray, datatype: str | None = None) -> Any:
        """An InferInput of the right protocol holding `array` (datatype from its numpy dtype)."""
        from tritonclient.utils import np_to_triton_dtype

        tensor = self._types.InferInput(name, list(array.shape), datatype or np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        return tensor

    def output(self, name: str, **kwargs: Any) -> Any:
        return self._types.InferRequestedOutput(name, **kwargs)

    def _arguments(self, sequence_id: int | str, headers: Mapping[str, str] | None) -> dict[str, Any]:
        return {"sequence_id": sequence_id, "headers": affinity_headers(headers, self.header, sequence_id)}


class TritonClient(_Client):
    """Synchronous client (tritonclient.http or tritonclient.grpc)."""

    def infer(
        self,
        model_name: str,
        inputs: list[Any],
        *,
        sequence_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        args = {"sequence_start": sequence_start, "sequence_end": sequence_end, **kwargs}
        try:
            return self.raw.infer(model_name, inputs, **args, **self._arguments(sequence_id, headers))
        except self._lost:
            if not no_sequence(sequence_id):
                raise
        return self.raw.infer(model_name, inputs, **args, **self._arguments(sequence_id, headers))

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncTritonClient(_Client):
    """asyncio client (tritonclient.http.aio or tritonclient.grpc.aio)."""

    _asynchronous = True

    async def infer(
        self,
        model_name: str,
        inputs: list[Any],
        *,
        sequence_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        args = {"sequence_start": sequence_start, "sequence_end": sequence_end, **kwargs}
        try:
            return await self.raw.infer(model_name, inputs, **args, **self._arguments(sequence_id, headers))
        except self._lost:
            if not no_sequence(sequence_id):
                raise
        return await self.raw.infer(model_name, inputs, **args, **self._arguments(sequence_id, headers))

    async def close(self) -> None:
        await self.raw.close()

    async def __aenter__(self) -> AsyncTritonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --------------------------------------------------------------------------- Stream routing


class SequenceBroken(RuntimeError):
    """The stream of a sequence ended before the sequence did (its connection or pod went away). Its
    state is gone with it: start the sequence again from its first chunk."""


def own_connection_args() -> list[tuple[str, Any]]:
    """tritonclient's default gRPC channel options plus a subchannel pool of the channel's own. gRPC
    otherwise shares one connection between channels to the same address, and with it one pod."""
    from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

    keepalive = KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.use_local_subchannel_pool", 1),
    ]


# The open-streams model of a `Stream` pipeline (compiler/open_streams_model.py, compiler/plan_types.py
# names it too): a stream registered there holds a leaving pod while it is open; one that is not, does not
OPEN_STREAMS_MODEL = "tritonpipeline__open_streams"
STREAM_LEASE_SECONDS = 15  # the model's lease time, when its answer does not say (its LEASE_SECONDS)


def lease_request(lease: bytes, opening: bool) -> dict[str, Any]:
    """A request to the open-streams model: open or renew `lease` (opening), or close it."""
    from tritonclient.grpc import InferInput

    lease_id = InferInput("LEASE", [1], "BYTES")
    lease_id.set_data_from_numpy(np.array([lease], dtype=np.object_))
    open_flag = InferInput("OPEN", [1], "BOOL")
    open_flag.set_data_from_numpy(np.array([opening], dtype=np.bool_))
    return {"model_name": OPEN_STREAMS_MODEL, "inputs": [lease_id, open_flag]}


def lease_seconds(result: Any) -> float:
    """The lease time the open-streams model answered (STREAM_LEASE_SECONDS when it says none)."""
    answered = result.as_numpy("LEASE_SECONDS")
    if answered is None or answered.size == 0 or int(answered.reshape(-1)[0]) <= 0:
        return float(STREAM_LEASE_SECONDS)
    return float(answered.reshape(-1)[0])


def is_lease_answer(result: Any) -> bool:
    return result is not None and result.get_response().model_name == OPEN_STREAMS_MODEL


async def queued(requests: Any) -> Any:
    """The requests put on `requests` until None (the stream's request side; not a method, so that the
    call does not hold its SequenceStream)."""
    while (request := await requests.get()) is not None:
        yield request


async def renew_lease(
    stream: weakref.ref[SequenceStream], requests: Any, lease: bytes, period: float
) -> None:
    """Renew `lease` every `period` seconds while its stream lives and its sequence goes on. Holds the
    stream weakly: a SequenceStream dropped without close() stops renewing, and its lease runs out."""
    import asyncio

    while True:
        await asyncio.sleep(period)
        seq = stream()
        if seq is None or seq.ended:
            return
        del seq
        await requests.put(lease_request(lease, True))


class SequenceStream:
    """One sequence of `model_name` as one gRPC stream (ModelStreamInfer) on a connection of its own
    (`spec.routing.sessionAffinity: Stream`). `send` sends one chunk and returns its InferResult; the first
    chunk carries the START flag, `end=True` the END flag. One response per request (not for decoupled
    models). Raises tritonclient's InferenceServerException for an error Triton answered, and
    SequenceBroken when the stream itself ended. `sequence_id` defaults to a random 63-bit number.

    On the same stream, before its first chunk, the stream registers with the pipeline's open-streams
    model (a random lease ID), renews that lease every third of its lease time (15 s) while the sequence
    goes on, and closes it with the END chunk or close(): a leaving pod waits for registered streams only
    (up to routing.streamDrainSeconds). Where the model is missing (a pipeline without `Stream`
    routing) the first answer is Triton's error and the stream simply goes on unregistered."""

    def __init__(
        self,
        url: str,
        model_name: str,
        *,
        sequence_id: int | str | None = None,
        headers: Mapping[str, str] | None = None,
        **client_args: Any,
    ) -> None:
        module, self._types = _modules("grpc", asynchronous=True)
        self.model_name = model_name
        self.sequence_id = sequence_id if sequence_id else secrets.randbits(63) | 1
        self._headers = dict(headers) if headers else None
        self.raw = module.InferenceServerClient(url, channel_args=own_connection_args(), **client_args)
        self._requests: Any = None
        self._responses: Any = None
        self._lease: bytes | None = None  # registered with the open-streams model, not closed yet
        self._renewal: Any = None  # the asyncio task renewing it
        self.started = self.ended = False

    def input(self, name: str, array: np.ndarray, datatype: str | None = None) -> Any:
        """An InferInput holding `array` (datatype from its numpy dtype)."""
        from tritonclient.utils import np_to_triton_dtype

        tensor = self._types.InferInput(name, list(array.shape), datatype or np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        return tensor

    async def _next(self) -> tuple[Any, Any]:
        """The stream's next (result, error); SequenceBroken when the stream itself ended."""
        try:
            return await self._responses.__anext__()
        except StopAsyncIteration as exc:
            self._broken()
            raise SequenceBroken(f"sequence {self.sequence_id}: the stream closed") from exc
        except Exception as exc:  # grpc.aio.AioRpcError and what tritonclient turns it into
            self._broken()
            raise SequenceBroken(f"sequence {self.sequence_id}: {exc}") from exc

    async def _answer(self) -> tuple[Any, Any]:
        """The next answer that is not the open-streams model's (its renewals' and closes' answers are
        skipped; it answers no error to a well-formed request, so an error is the chunk's)."""
        while True:
            result, error = await self._next()
            if not is_lease_answer(result):
                return result, error

    async def _open(self) -> None:
        """Open the stream and register it; wait for the registration's answer, the only request on the
        stream, so that an error (no open-streams model there) cannot be taken for a chunk's."""
        import asyncio

        self._requests = asyncio.Queue()
        self._responses = self.raw.stream_infer(queued(self._requests), headers=self._headers)
        lease = secrets.token_hex(16).encode()
        await self._requests.put(lease_request(lease, True))
        result, error = await self._next()
        if error is None and is_lease_answer(result):
            self._lease = lease
            period = lease_seconds(result) / 3
            self._renewal = asyncio.create_task(renew_lease(weakref.ref(self), self._requests, lease, period))

    def _release(self) -> None:
        """Close the lease (the stream still open) and stop renewing it."""
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        if self._lease is not None and self._requests is not None:
            self._requests.put_nowait(lease_request(self._lease, False))
        self._lease = None

    def _broken(self) -> None:
        self.ended = True
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        self._lease = None  # the stream is gone: nothing to close it on (the lease runs out)

    async def send(self, inputs: list[Any], *, end: bool = False, **kwargs: Any) -> Any:
        if self.ended:
            raise SequenceBroken(f"sequence {self.sequence_id} has ended; open a new SequenceStream")
        if self._responses is None:
            await self._open()
        request = {
            "model_name": self.model_name,
            "inputs": inputs,
            "sequence_id": self.sequence_id,
            "sequence_start": not self.started,
            "sequence_end": end,
            **kwargs,
        }
        self.started = True
        self.ended = end
        await self._requests.put(request)
        result, error = await self._answer()
        if end:
            self._release()
        if error is not None:
            raise error
        return result

    async def close(self) -> None:
        """Close the lease, end the stream, wait (at most 5 s) for the server to end its side, then close
        the connection. Closing the channel while the call is still open leaves its TCP connection
        established. A sequence not ended is left to Triton's idle timeout."""
        import asyncio
        import contextlib

        self.ended = True
        self._release()
        if self._requests is not None:
            await self._requests.put(None)
            with contextlib.suppress(Exception):  # the end of the call, or its error: either way it is over
                await asyncio.wait_for(self._finish(), timeout=5)
        await self.raw.close()
        # gRPC closes the TCP connection when the channel object is freed, not at close(): drop ours
        self._requests = self._responses = self.raw = None

    async def _finish(self) -> None:
        async for _ in self._responses:
            pass

    async def __aenter__(self) -> SequenceStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
