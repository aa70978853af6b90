"""The active replica (render/peering.py decides): read the peering objects, tell the rest of the process."""

from __future__ import annotations

import asyncio
import datetime

import kopf

from ..render import peering
from ..runtime import log_events as events
from ..runtime import metrics
from ..runtime.loops import LEADERSHIP, supervise
from ..runtime.state import OperatorState

CHECK_SECONDS = 3.0  # how often a replica reads the peering objects


def read_blockers(state: OperatorState) -> list[str]:
    """The peers this replica waits for (render/peering.py `blockers_in`), read from every peering object
    it takes part in: one per watched namespace, or the cluster's. Raises KubeError."""
    config = state.settings
    kind = peering.NAMESPACED_KIND if config.namespaces else peering.CLUSTER_KIND
    objects = {
        ns: state.kube.get(peering.API_VERSION, kind, ns, config.peering)
        for ns in config.namespaces or (None,)
    }
    now = datetime.datetime.now(datetime.timezone.utc)
    return peering.blockers_in(objects, kind, config.peering, state.identity, state.priority, now)


def set_active(
    state: OperatorState, active: bool, blockers: list[str], logger: kopf.Logger, first: bool = False
) -> None:
    """Record whether this replica reconciles; log the first answer and each change."""
    metrics.ACTIVE.set(1 if active else 0)
    state.health.standby = state.loops.standby = not active
    if active == state.active and not first:
        return
    state.active = active
    if active:
        events.REPLICA_ACTIVE.log(logger, identity=state.identity)
    else:
        peers = [b for b in blockers if not b.startswith("(")]  # the peers, else why it waits
        waits = ", ".join(peers or blockers)
        events.REPLICA_STANDBY.log(logger, identity=state.identity, active=waits)


async def leadership_loop(state: OperatorState, logger: kopf.Logger) -> None:
    """Every CHECK_SECONDS, whether this replica is the active one (what kopf decides from the same
    objects), on every replica. A pass that fails (runtime/loops.py) keeps the last answer."""
    first = True  # a replica starts standby (handlers.start): say so too, not only a change

    async def check() -> None:
        nonlocal first
        blockers = await asyncio.to_thread(read_blockers, state)
        set_active(state, not blockers, blockers, logger, first)
        first = False

    await supervise(state.loops, state.loops.add(LEADERSHIP, CHECK_SECONDS), check, logger)
