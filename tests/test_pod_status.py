"""Ready says why a pipeline's pods do not become ready, from the pods' own status (pure functions;
the pod status shapes are those a kubelet writes, as seen on the node test bed)."""

from __future__ import annotations

from typing import Any

from tritonpipeline.kube.status import pod_problem, ready_condition

MISSING = "spec.models: model directory 'head_missing' not found in the source '/tp/source/triton'"


def _pod(name: str = "vision-1", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def _terminated(code: int, message: str = "") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed", "message": message}}


def test_failed_init_container_names_its_last_words() -> None:
    log_tail = f"reading /tp/generated\n{MISSING}\n"
    retrying = {
        "name": "assemble-repository",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
        "lastState": _terminated(1, log_tail),
    }
    reason, message = pod_problem([_pod(initContainerStatuses=[retrying])])  # type: ignore[misc]
    assert reason == "InitContainerFailed"
    assert message == f"pod vision-1: init container assemble-repository failed: {MISSING}"
    # the first failure, before the back-off, and while it runs again
    for state in (_terminated(1, log_tail), {"running": {}}):
        first = {"name": "assemble-repository", "state": state, "lastState": _terminated(1, log_tail)}
        assert pod_problem([_pod(initContainerStatuses=[first])])[0] == "InitContainerFailed"  # type: ignore[index]


def test_failure_without_a_message_gives_the_exit() -> None:
    init = {"name": "assemble-repository", "state": _terminated(2)}
    assert pod_problem([_pod(initContainerStatuses=[init])]) == (
        "InitContainerFailed",
        "pod vision-1: init container assemble-repository failed: exit code 2 (Error)",
    )


def test_stuck_containers_and_unschedulable_pods() -> None:
    pull = {
        "name": "tritonserver",
        "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}},
    }
    assert pod_problem([_pod(containerStatuses=[pull])]) == (
        "ErrImageNeverPull",
        "pod vision-1: container tritonserver: not present",
    )
    crash = {
        "name": "tritonserver",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": _terminated(1, "error: creating server: Internal - failed to load all models"),
    }
    reason, message = pod_problem([_pod(containerStatuses=[crash])])  # type: ignore[misc]
    assert reason == "CrashLoopBackOff"
    assert message.endswith(
        "back-off 40s; last exit: error: creating server: Internal - failed to load all models"
    )
    pending = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "1 Insufficient cpu.",
    }
    assert pod_problem([_pod(conditions=[pending])]) == (
        "Unschedulable",
        "pod vision-1 cannot be scheduled: 1 Insufficient cpu.",
    )


def test_starting_pods_and_successful_init_are_no_problem() -> None:
    done = {"name": "assemble-repository", "state": _terminated(0)}
    creating = {"name": "tritonserver", "state": {"waiting": {"reason": "ContainerCreating"}}}
    assert pod_problem([_pod(initContainerStatuses=[done], containerStatuses=[creating])]) is None
    assert pod_problem([]) is None


def test_ready_condition_carries_the_problem_only_when_not_ready() -> None:
    problem = ("InitContainerFailed", "pod p: init container assemble-repository failed: boom")
    _, ready = ready_condition(1, 0, 1, 1, 3, problem=problem)
    assert (ready["status"], ready["reason"]) == ("False", "InitContainerFailed")
    assert ready["message"] == f"0/1 Triton replicas ready; {problem[1]}"
    # a ready pipeline (another pod fails during a rollout surge: Progressing tells) stays Ready
    _, ready = ready_condition(1, 1, 1, 1, 3, problem=problem)
    assert (ready["status"], ready["reason"]) == ("True", "AllReplicasReady")


def test_every_pod_problem_reason_is_documented() -> None:
    """The reasons pod_problem can give are not literals in a condition() call (tests/test_docs.py reads
    those): each needs its row in README 'Reading status' too."""
    from pathlib import Path

    from tritonpipeline.kube.status import INIT_FAILED, STUCK_WAITING

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Reading status", 1)[1].split("\n## ", 1)[0]
    missing = [r for r in (INIT_FAILED, "Unschedulable", *STUCK_WAITING) if f"`{r}`" not in section]
    assert not missing, missing
