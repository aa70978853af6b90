"""tritonpipeline.client.SequenceStream against a real tritonserver serving examples/streaming.yaml: each
sequence is one gRPC stream on a connection of its own, interleaved sequences keep their own running
totals, Triton's errors come through as they are, and a stream cut by the server is a SequenceBroken."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from helpers import established, example
from tritonpipeline.client import SequenceBroken, SequenceStream

pytestmark = pytest.mark.tritonserver

STREAMS = 8  # the accumulator's sequence slots (direct strategy: maxBatchSize x 1 instance)
CHUNKS = 8


@pytest.fixture(scope="module")
def server(shared_pipeline):
    return shared_pipeline(example("streaming"))


async def one_sequence(url: str, codes: list[int], opened: asyncio.Barrier, kept: list) -> list[float]:
    totals = []
    async with SequenceStream(url, "streaming") as seq:
        kept.append(seq)  # still referenced after close, as a caller's variable would be
        for i, code in enumerate(codes):
            chunk = seq.input("CHUNK", np.array([[code]], dtype=np.int32))
            totals.append(float((await seq.send([chunk], end=i == len(codes) - 1)).as_numpy("TOTAL")[0][0]))
            if i == 0:
                await opened.wait()  # every stream open at once before any goes on
    return totals


def test_interleaved_streams_keep_their_own_totals_on_their_own_connections(server):
    """Each open sequence is one established connection (with Stream routing, one pod per sequence), and
    closing a stream closes its connection at once, while the program goes on (no connection is left
    behind for every sequence a long-lived program ran). This pipeline has Header routing, so no
    open-streams model: each stream's registration is refused and the stream goes on without one."""
    rng = random.Random(7)
    codes = [[rng.randint(-50, 50) for _ in range(CHUNKS)] for _ in range(STREAMS)]
    seen: list[int] = []

    async def run() -> list[list[float]]:
        opened = asyncio.Barrier(STREAMS + 1)
        kept: list[SequenceStream] = []
        tasks = [asyncio.create_task(one_sequence(server.grpc_url, c, opened, kept)) for c in codes]
        await opened.wait()
        seen.append(established(server.grpc_port))
        results = await asyncio.gather(*tasks)
        for _ in range(20):  # closed streams close their connections, the loop still running
            if established(server.grpc_port) == 0:
                break
            await asyncio.sleep(0.1)
        seen.append(established(server.grpc_port))
        return results

    results = asyncio.run(run())
    for c, totals in zip(codes, results, strict=True):
        assert totals == pytest.approx(list(np.cumsum(np.array(c) * 0.5)))
    assert seen == [STREAMS, 0]  # one connection per open sequence, none once they are closed


def test_tritons_own_error_comes_through_and_a_used_stream_refuses_more(server):
    from tritonclient.utils import InferenceServerException

    async def run() -> None:
        async with SequenceStream(server.grpc_url, "streaming") as seq:
            with pytest.raises(InferenceServerException, match=r"CHUNK|input"):
                await seq.send([seq.input("WRONG", np.array([[1]], dtype=np.int32))])
        async with SequenceStream(server.grpc_url, "streaming", sequence_id=99) as seq:
            out = await seq.send([seq.input("CHUNK", np.array([[4]], dtype=np.int32))], end=True)
            assert out.as_numpy("TOTAL")[0][0] == 2.0
            with pytest.raises(SequenceBroken, match="has ended"):
                await seq.send([seq.input("CHUNK", np.array([[4]], dtype=np.int32))])

    asyncio.run(run())


def test_a_stream_cut_by_the_server_is_a_broken_sequence(serve_pipeline):
    server = serve_pipeline(example("streaming"))

    async def run() -> None:
        seq = SequenceStream(server.grpc_url, "streaming")
        await seq.send([seq.input("CHUNK", np.array([[2]], dtype=np.int32))])
        server.stop(timeout=15)
        with pytest.raises(SequenceBroken):
            await seq.send([seq.input("CHUNK", np.array([[2]], dtype=np.int32))])
        await seq.close()

    asyncio.run(run())
