"""Ready says why a pipeline's pods do not become ready, from the pods' own status (pure functions;
the pod status shapes are those a kubelet writes, as seen on real pods)."""

from __future__ import annotations

from typing import Any

from tritonpipeline.render.conditions import pod_problem, ready_condition

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


# what the Deployment controller copies from its ReplicaSet when the API server refuses the pods (the text of
# a Pod Security refusal as the real apiserver words it: tests/component/test_pod_spec.py sees it there)
REFUSED = (
    'pods "vision-7c9d-x2" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
    '!= false (container "tritonserver" must set securityContext.allowPrivilegeEscalation=false)'
)


def test_pods_the_api_server_refuses_are_named_in_ready() -> None:
    from tritonpipeline.reconcile.status_writer import replica_status

    deployment = {
        "metadata": {"generation": 2},
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 2,
            "replicas": 0,
            "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": REFUSED},
            ],
        },
    }
    ready = replica_status(deployment, 2, [], pods=[])["conditions"][-1]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "PodsRefused")
    assert ready["message"] == f"0/2 Triton replicas ready; pods cannot be created: {REFUSED}"
    # the condition cleared (the namespace's policy relaxed, the pods created): starting, no reason given
    deployment["status"]["conditions"][1]["status"] = "False"
    assert replica_status(deployment, 2, [], pods=[])["conditions"][-1]["reason"] == "ReplicasNotReady"


def test_every_pod_problem_reason_is_documented() -> None:
    """The reasons pod_problem can give are not literals in a condition() call (tests/unit/test_docs.py reads
    those): each needs its row in docs/how-to/status.md too."""
    from helpers import docs_page
    from tritonpipeline.render.conditions import INIT_FAILED, PODS_REFUSED, STUCK_WAITING

    section = docs_page("how-to/status.md")
    reasons = (INIT_FAILED, PODS_REFUSED, "Unschedulable", *STUCK_WAITING)
    missing = [r for r in reasons if f"`{r}`" not in section]
    assert not missing, missing


def test_a_pod_waits_for_its_missing_secret_only_when_the_kubelet_names_that_secret() -> None:
    from tritonpipeline.render.access import waits_for_secret

    def waiting(reason: str, message: str) -> dict[str, Any]:
        return _pod(
            containerStatuses=[
                {"name": "tritonserver", "state": {"waiting": {"reason": reason, "message": message}}}
            ]
        )

    missing = 'secret "vision-admin-key" not found'
    assert waits_for_secret([_pod(), waiting("CreateContainerConfigError", missing)], "vision-admin-key")
    from_apiserver = 'secrets "vision-admin-key" not found'  # the kubelet's Get strategy: the API's NotFound
    assert waits_for_secret([waiting("CreateContainerConfigError", from_apiserver)], "vision-admin-key")
    assert not waits_for_secret([waiting("CreateContainerConfigError", missing)], "vision")  # another name
    assert not waits_for_secret(
        [waiting("CreateContainerConfigError", 'configmap "vision-repo-0" not found')], "vision-admin-key"
    )
    assert not waits_for_secret([waiting("ContainerCreating", missing)], "vision-admin-key")
    assert not waits_for_secret([_pod()], "vision-admin-key")
