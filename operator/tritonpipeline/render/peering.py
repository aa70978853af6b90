"""Which replica reconciles (docs/how-to/operate.md): kopf's peering, with the oldest replica active.

Every replica runs kopf with peering on one peering object (a ClusterKopfPeering when the operator watches
every namespace, a KopfPeering in each watched namespace otherwise; the chart creates them). Each replica
keeps its entry in the object's status (priority, last seen, lifetime) and kopf pauses a replica's resource
watches, and so its handlers, while a live peer has a higher priority, or the same one. Here the
priority is the negative of the replica's start time: the oldest live replica is active, and a new one
(a rolling update's, a restarted one) waits, so the active replica changes only when it is gone: at
once when it stops (kopf removes its entry), after its lifetime when it is killed.

Every replica serves the admission webhook: kopf's pause stops watching, not the webhook server. Work
kopf does not pause (the resync and status-poll loops, what liveness and readiness ask of the watches)
asks `blockers`, kopf's rule on the same object. Pure: no API calls here."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

API_VERSION = "kopf.dev/v1"
CLUSTER_KIND = "ClusterKopfPeering"
NAMESPACED_KIND = "KopfPeering"
PLURALS = {CLUSTER_KIND: "clusterkopfpeerings", NAMESPACED_KIND: "kopfpeerings"}


def priority(started: float, salt: int = 0) -> int:
    """The priority of a replica started at `started` (epoch seconds): older is higher. `salt` (0 to
    999, random per process) orders replicas started in the same millisecond: kopf pauses every replica
    of a tie, for good."""
    return -(int(started * 1000) * 1000 + salt)


@dataclass(frozen=True)
class Peer:
    identity: str
    priority: int
    deadline: datetime.datetime


def peers(status: Mapping[str, Any] | None) -> list[Peer]:
    """The entries kopf keeps in a peering object's status: {identity: {priority, lifetime, lastseen}}."""
    found = []
    for identity, entry in (status or {}).items():
        if not isinstance(entry, Mapping):
            continue
        try:  # a malformed entry is skipped (a ValueError here would end the leadership loop)
            lastseen = datetime.datetime.fromisoformat(str(entry.get("lastseen")))
            lifetime = datetime.timedelta(seconds=int(entry.get("lifetime", 60)))
            rank = int(entry.get("priority", 0))
        except (TypeError, ValueError, OverflowError):
            continue
        if lastseen.tzinfo is None:
            lastseen = lastseen.replace(tzinfo=datetime.timezone.utc)
        found.append(Peer(str(identity), rank, lastseen + lifetime))
    return found


def blockers(
    status: Mapping[str, Any] | None, identity: str, own_priority: int, now: datetime.datetime
) -> list[str]:
    """The live peers for which kopf pauses this replica (a higher priority, or the same one), by
    identity; empty: this replica is active."""
    return sorted(
        p.identity
        for p in peers(status)
        if p.identity != identity and p.deadline > now and p.priority >= own_priority
    )


def blockers_in(
    objects: Mapping[str | None, Mapping[str, Any] | None],
    kind: str,
    name: str,
    identity: str,
    own_priority: int,
    now: datetime.datetime,
) -> list[str]:
    """What this replica waits for in the peering objects it takes part in (namespace, or None for the
    cluster's -> the object, None when missing): live peers that outrank it, a missing object (kopf waits
    for it too), and an object without this replica's entry yet (kopf writes it first, so a replica that
    started earlier is seen by then)."""
    found: list[str] = []
    for namespace, obj in objects.items():
        where = f" in namespace {namespace}" if namespace else ""
        if obj is None:
            found.append(f"(no {kind} {name!r}{where})")
            continue
        status = obj.get("status") or {}
        if identity not in status:
            found.append(f"(this replica's entry, not yet in {kind} {name!r}{where})")
        found += blockers(status, identity, own_priority, now)
    return sorted(set(found))
