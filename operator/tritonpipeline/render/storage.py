"""Whether every Triton pod of a pipeline can mount its model claim (pure).

A ReadWriteOnce (or ReadWriteOncePod) PersistentVolumeClaim is mounted by the pods of one node only:
with several replicas the scheduler puts pods on other nodes, where they stay Pending or ContainerCreating
("Multi-Attach error"). The ModelSource condition says so before anyone has to read pod events.
"""

from __future__ import annotations

from typing import Any

from ..spec import TritonPipeline
from . import conditions as st

SINGLE_NODE_MODES = {"ReadWriteOnce", "ReadWriteOncePod"}


def claim_name(tp: TritonPipeline) -> str | None:
    """The claim of a pvc:// model repository, else None."""
    repo = tp.spec.model_repository
    if repo.scheme != "pvc":
        return None
    return repo.uri[len("pvc://") :].partition("/")[0]


def most_replicas(tp: TritonPipeline) -> int:
    auto = tp.spec.autoscaling
    return auto.max_replicas if auto is not None else tp.spec.server.replicas


def model_source(tp: TritonPipeline, claim: dict[str, Any] | None) -> st.Condition | None:
    """ModelSource for a pvc:// repository (None for other sources); `claim` is the live claim or None."""
    name = claim_name(tp)
    if name is None:
        return None
    if claim is None:
        message = (
            f"PersistentVolumeClaim {name} does not exist: the pods wait for it (create it, or fix the uri)"
        )
        return st.Condition("ModelSource", False, "ClaimNotFound", message)
    modes = set(claim.get("spec", {}).get("accessModes") or [])
    replicas = most_replicas(tp)
    if modes and modes <= SINGLE_NODE_MODES and replicas > 1:
        message = (
            f"PersistentVolumeClaim {name} is {', '.join(sorted(modes))}: only pods on one node can mount "
            f"it, and this pipeline runs up to {replicas} replicas; pods on other nodes stay Pending or "
            "ContainerCreating. Use a ReadOnlyMany or ReadWriteMany claim, or keep the pods on one node "
            "(spec.server.nodeSelector / affinity)"
        )
        return st.Condition("ModelSource", False, "ReadWriteOnceClaim", message)
    how = ", ".join(sorted(modes)) or "no access modes given"
    return st.Condition("ModelSource", True, "ClaimMountable", f"PersistentVolumeClaim {name} ({how})")
