"""The Triton pods as real clusters want them: Pod Security "restricted", requests, pull secrets, a
service account, the startup budget, and MIG limits (renderers pure; admission on the real apiserver).
Here the pure tests; those on real components are in tests/component/test_pod_spec.py."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import example
from support.pod_spec import cluster_doc, pod_spec
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline


def test_pods_are_restricted_by_default() -> None:
    pod = pod_spec(cluster_doc())
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # the init container writes only into the models volume; Triton's backends write caches, so its root
    # filesystem stays writable unless the spec says otherwise
    (init,) = pod["initContainers"]
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert "readOnlyRootFilesystem" not in pod["containers"][0]["securityContext"]


def test_replicas_are_spread_over_nodes_unless_the_spec_says_where() -> None:
    spread = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {
                            "matchLabels": {
                                "app.kubernetes.io/name": "triton-pipeline",
                                "app.kubernetes.io/instance": "vision",
                            }
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }
    # the same for one replica: scaling must not change the pod template (it would roll every pod)
    assert pod_spec(cluster_doc())["affinity"] == spread
    assert pod_spec(cluster_doc(replicas=2))["affinity"] == spread
    scaled = cluster_doc()
    scaled["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 3}
    assert pod_spec(scaled)["affinity"] == spread
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    assert pod_spec(cluster_doc(replicas=2, affinity=mine))["affinity"] == mine


def test_security_contexts_are_merged_over_the_restricted_defaults() -> None:
    """Setting one field keeps the others (before, a mapping replaced the defaults, and the pods were then
    refused in a namespace enforcing "restricted")."""
    mine = {"readOnlyRootFilesystem": True, "capabilities": {"add": ["NET_BIND_SERVICE"]}}
    pod = pod_spec(cluster_doc(podSecurityContext={"fsGroup": 7, "runAsUser": 2000}, securityContext=mine))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "runAsGroup": 1000,
        "fsGroup": 7,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            "readOnlyRootFilesystem": True,
        }
    off = pod_spec(cluster_doc(securityContext={"readOnlyRootFilesystem": False}))
    assert off["initContainers"][0]["securityContext"]["readOnlyRootFilesystem"] is False  # the spec's word


def test_where_the_platform_assigns_ids_the_pods_name_none_but_their_own() -> None:
    """OpenShift's restricted-v2 SCC refuses a uid or fsGroup outside the namespace's range, 1000
    included: with platform ids the defaults name none, and what restricted needs stays."""
    openshift = Settings(adapt_security_context="force")
    pod = pod_spec(cluster_doc(), openshift)
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod_spec(cluster_doc())["containers"] == pod["containers"]  # the containers name no ids
    # a spec's own ids are the author's word
    mine = pod_spec(cluster_doc(podSecurityContext={"runAsUser": 1000680000}), openshift)["securityContext"]
    assert (mine["runAsUser"], "runAsGroup" in mine, "fsGroup" in mine) == (1000680000, False, False)
    # `auto` is the operator's to resolve (it asks the cluster); a render that asks none keeps the defaults
    assert (
        pod_spec(cluster_doc(), Settings(adapt_security_context="auto"))["securityContext"]["fsGroup"] == 1000
    )
    # root stays refused
    with pytest.raises(SpecError, match=r"spec\.server\.podSecurityContext\.runAsUser"):
        pod_spec(cluster_doc(podSecurityContext={"runAsUser": 0}), openshift)


# (server fields, the field path refused, words of the reason): each breaks Pod Security "restricted"
BEYOND_RESTRICTED = [
    ({"securityContext": {"privileged": True}}, "spec.server.securityContext.privileged", "privileged"),
    (
        {"securityContext": {"allowPrivilegeEscalation": True}},
        "spec.server.securityContext.allowPrivilegeEscalation",
        "privilege escalation",
    ),
    (
        {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
        "spec.server.securityContext.capabilities.add[0]",
        "'SYS_ADMIN'",
    ),
    (
        {"securityContext": {"capabilities": {"drop": []}}},
        "spec.server.securityContext.capabilities.drop",
        "drop must hold ALL",
    ),
    ({"securityContext": {"runAsUser": 0}}, "spec.server.securityContext.runAsUser", "root"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "spec.server.podSecurityContext.runAsNonRoot", "false"),
    (
        {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}},
        "spec.server.podSecurityContext.seccompProfile.type",
        "'Unconfined'",
    ),
    (
        {"podSecurityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},
        "spec.server.podSecurityContext.sysctls[0]",
        "'kernel.msgmax'",
    ),
    ({"securityContext": {"procMount": "Unmasked"}}, "spec.server.securityContext.procMount", "'Unmasked'"),
    (
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
        "spec.server.securityContext.seLinuxOptions.type",
        "'spc_t'",
    ),
]


@pytest.mark.parametrize(
    ("server", "path", "words"), BEYOND_RESTRICTED, ids=[b[1] for b in BEYOND_RESTRICTED]
)
def test_more_than_restricted_is_refused_unless_the_admin_grants_it(server, path, words) -> None:
    doc = cluster_doc(**server)
    with pytest.raises(SpecError) as err:
        pod_spec(doc)
    (problem,) = err.value.problems
    assert problem.path == path and words in problem.message
    assert "Pod Security 'restricted' forbids it" in problem.message
    assert "security.allowPrivilegedPipelines" in problem.message
    pod_spec(doc, Settings(allow_privileged=True))  # the cluster admin's grant


def test_the_privileged_grant_can_be_limited_to_namespaces() -> None:
    """security.privilegedNamespaces: the grant holds in the namespaces listed, nowhere else."""
    doc = cluster_doc(securityContext={"privileged": True})  # in namespace ml
    granted = pod_spec(doc, Settings(privileged_namespaces=("research", "ml")))
    assert granted["containers"][0]["securityContext"]["privileged"] is True
    with pytest.raises(SpecError) as err:
        pod_spec(doc, Settings(privileged_namespaces=("research", "ml-dev")))
    (problem,) = err.value.problems
    assert problem.path == "spec.server.securityContext.privileged"
    assert "security.privilegedNamespaces" in problem.message


def test_the_service_account_token_is_mounted_only_for_a_service_account_of_its_own() -> None:
    assert pod_spec(cluster_doc())["automountServiceAccountToken"] is False
    allowed = Settings(allowed_service_accounts=("triton-irsa",))
    assert "automountServiceAccountToken" not in pod_spec(
        cluster_doc(serviceAccountName="triton-irsa"), allowed
    )


@pytest.mark.parametrize(
    ("allowed", "ok"),
    [
        ((), False),
        (("other",), False),
        (("triton-irsa",), True),
        (("ml/triton-irsa",), True),
        (("dev/triton-irsa",), False),
        (("*",), True),
    ],
)
def test_service_accounts_only_from_the_admins_allow_list(allowed: tuple[str, ...], ok: bool) -> None:
    doc = cluster_doc(serviceAccountName="triton-irsa")  # namespace ml
    if ok:
        assert (
            pod_spec(doc, Settings(allowed_service_accounts=allowed))["serviceAccountName"] == "triton-irsa"
        )
        return
    with pytest.raises(SpecError) as err:
        pod_spec(doc, Settings(allowed_service_accounts=allowed))
    (problem,) = err.value.problems
    assert problem.path == "spec.server.serviceAccountName"
    assert "'triton-irsa' is not one the cluster admin allows" in problem.message


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("nvcr.io/nvidia/tritonserver:26.08-py3", True),
        ("registry.example.com:5000/triton:1", True),
        ("tritonserver:latest", True),  # Docker Hub
        ("index.docker.io/library/tritonserver:latest", True),  # Docker Hub's other name
        ("evil.example.org/nvcr.io/tritonserver:1", False),
        ("NVCR.IO/nvidia/tritonserver:26.08-py3", True),  # host names are case-insensitive
        # an upper-case first component is a host to the runtimes (pulled from "Mirror"), not Docker Hub
        ("Mirror/nvcr.io/tritonserver:1", False),
    ],
)
def test_images_only_from_allowed_registries_when_the_admin_says(image: str, ok: bool) -> None:
    settings = Settings(allowed_image_registries=("nvcr.io", "registry.example.com:5000", "docker.io"))
    doc = cluster_doc(image=image)
    pod_spec(doc)  # no list: any registry
    if ok:
        assert pod_spec(doc, settings)["containers"][0]["image"] == image
        return
    with pytest.raises(SpecError) as err:
        pod_spec(doc, settings)
    assert [p.path for p in err.value.problems] == ["spec.server.image"]


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
def test_pipelines_in_the_clusters_own_namespaces_are_refused(namespace: str) -> None:
    """Issue 54: a pipeline in kube-system was accepted; its pods would run beside the control plane's."""
    doc = cluster_doc()
    doc["metadata"]["namespace"] = namespace
    with pytest.raises(SpecError) as err:
        pod_spec(doc)
    (problem,) = err.value.problems
    assert problem.path == "metadata.namespace"
    assert f"refused in namespace {namespace!r}, one of the cluster's own" in problem.message
    assert pod_spec(doc, Settings(refused_namespaces=()))["containers"]  # the admin may allow it


def test_default_requests_only_where_the_spec_sets_nothing() -> None:
    triton = pod_spec(cluster_doc())["containers"][0]["resources"]
    assert triton["requests"] == {
        "cpu": "1",
        "memory": "2Gi",
        "ephemeral-storage": "2Gi",
        "nvidia.com/gpu": "1",
    }
    assert triton["limits"] == {"memory": "16Gi", "nvidia.com/gpu": "1"}  # one pipeline cannot take the node
    # a limit alone: Kubernetes takes the request from it; a default request could exceed it
    mine = {"limits": {"cpu": "500m"}, "requests": {"memory": "8Gi"}}
    triton = pod_spec(cluster_doc(resources=mine))["containers"][0]["resources"]
    assert "cpu" not in triton["requests"] and triton["requests"]["memory"] == "8Gi"
    assert triton["limits"]["cpu"] == "500m" and triton["limits"]["nvidia.com/gpu"] == "1"
    assert "memory" not in triton["limits"]  # the user's memory request: no default limit below it


def test_every_volume_of_the_pod_has_a_size_limit() -> None:
    for doc in (
        cluster_doc(),
        cluster_doc(replicas=2),
        cluster_doc(shmSizeLimit="4Gi", modelsSizeLimit="200Gi"),
    ):
        pod = pod_spec(doc)
        dirs = {v["name"]: v["emptyDir"] for v in pod["volumes"] if "emptyDir" in v}
        assert dirs and all(d.get("sizeLimit") for d in dirs.values()), dirs
    assert dirs["dshm"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    assert dirs["models"] == {"sizeLimit": "200Gi"}
    with pytest.raises(SpecError) as err:
        pod_spec(cluster_doc(shmSizeLimit="lots"))
    assert "spec.server.shmSizeLimit" in str(err.value) and "a Kubernetes quantity" in str(err.value)


def test_init_container_resources_default_and_override() -> None:
    init = pod_spec(cluster_doc())["initContainers"][0]["resources"]
    assert init["requests"] == {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "256Mi"}
    assert init["limits"] == {"memory": "1Gi"}
    mine = {"requests": {"cpu": "2"}}
    assert pod_spec(cluster_doc(initResources=mine))["initContainers"][0]["resources"] == mine


@pytest.mark.parametrize(("seconds", "threshold"), [(600, 120), (601, 121), (3600, 720), (10, 2)])
def test_startup_probe_budget(seconds: int, threshold: int) -> None:
    probe = pod_spec(cluster_doc(startupTimeoutSeconds=seconds))["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= seconds
    assert probe["failureThreshold"] == threshold


def test_service_account_and_pull_secrets_reach_the_pod() -> None:
    doc = cluster_doc(
        serviceAccountName="triton-irsa", imagePullSecrets=[{"name": "ngc"}, {"name": "mirror"}]
    )
    settings = Settings(
        assembler_pull_secrets=("mirror", "operator-registry"), allowed_service_accounts=("*",)
    )
    pod = pod_spec(doc, settings)
    assert pod["serviceAccountName"] == "triton-irsa"
    assert pod["imagePullSecrets"] == [{"name": "ngc"}, {"name": "mirror"}, {"name": "operator-registry"}]
    assert "imagePullSecrets" not in pod_spec(cluster_doc())


@pytest.mark.parametrize(
    ("server", "autoscaling", "path"),
    [
        ({"gpuResource": "nvidia.com/mig-1g.10gb", "gpus": 2}, None, "spec.server.gpus"),
        (
            {"gpuResource": "nvidia.com/mig-3g.40gb"},
            {"minReplicas": 1, "maxReplicas": 2, "metric": "gpuUtilization", "target": 60},
            "spec.autoscaling.metric",
        ),
    ],
)
def test_mig_combinations_that_cannot_work_are_refused(server, autoscaling, path) -> None:
    doc = cluster_doc(**server)
    if autoscaling:
        doc["spec"]["autoscaling"] = autoscaling
    with pytest.raises(SpecError) as err:
        pod_spec(doc)
    assert [p.path for p in err.value.problems] == [path]
    assert "MIG" in err.value.problems[0].message


def test_one_mig_device_with_queue_time_is_fine() -> None:
    doc = cluster_doc(gpuResource="nvidia.com/mig-1g.10gb")
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "metric": "queueTime", "target": 50}
    assert pod_spec(doc)["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"


@pytest.mark.parametrize(
    ("args", "exit_timeout"), [([], 30), (["--exit-timeout-secs=90"], 90), (["--exit-t", "5"], 5)]
)
def test_stateless_pods_keep_serving_until_endpoints_drop_them(args, exit_timeout) -> None:
    """preStop waits before tritonserver's SIGTERM (it refuses new requests from then on), and the grace
    period covers that wait and Triton's exit timeout, the user's if set (in any spelling)."""
    pod = pod_spec(cluster_doc(args=args))
    triton = pod["containers"][0]
    assert triton["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "10"]}}
    assert pod["terminationGracePeriodSeconds"] >= 10 + exit_timeout


@pytest.mark.parametrize("source", ["fanout", "streaming"])
def test_on_an_ipv6_pod_network_triton_listens_on_ipv6_and_its_probes_ask_there(source) -> None:
    """IPv4 (the default): tritonserver's own addresses (0.0.0.0). IPv6: its HTTP and metrics endpoints
    on `ipv6:::` (an IPv6 address is written so for them, and they take one family), gRPC on `[::]`,
    and the exec readiness probe of a stateful pipeline asks [::1] (the httpGet probes go to the pod's
    IP, whichever family)."""
    doc = example(source)
    doc["metadata"]["namespace"] = "ml"
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    flags = ("--http-address", "--grpc-address", "--metrics-address")
    v4 = pod_spec(doc)["containers"][0]
    assert [a for a in v4["args"] if a.split("=")[0] in flags] == []
    v6 = pod_spec(doc, Settings(ip_family="IPv6"))["containers"][0]
    addresses = ["--http-address=ipv6:::", "--grpc-address=[::]", "--metrics-address=ipv6:::"]
    assert [a for a in v6["args"] if a.split("=")[0] in flags] == addresses
    probe = v6["readinessProbe"]
    if source == "streaming":
        assert "http://[::1]:8000/v2/health/ready" in probe["exec"]["command"][-1]
        assert "127.0.0.1" in v4["readinessProbe"]["exec"]["command"][-1]
    else:
        assert probe["httpGet"]["port"] == "http"
    assert v4["ports"] == v6["ports"] and v4["livenessProbe"] == v6["livenessProbe"]


def test_stateful_grace_period_covers_the_users_exit_timeout() -> None:
    doc = example("streaming")
    doc["metadata"]["namespace"] = "ml"
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"]["server"]["args"] = ["--exit-timeout-secs=120"]
    pod = pod_spec(doc)
    assert "exec" in pod["containers"][0]["lifecycle"]["preStop"]
    assert pod["terminationGracePeriodSeconds"] >= 5 + 5 + 120  # idle 5 s + margin, then Triton's 120 s


def deployment_spec(doc: dict[str, Any]) -> dict[str, Any]:
    tp = parse_pipeline(doc)
    return render_children(tp, compile_pipeline(tp), Settings()).deployment["spec"]


def test_rollout_strategy_is_the_users_when_set() -> None:
    mine = {"type": "Recreate"}
    assert deployment_spec(cluster_doc(strategy=mine))["strategy"] == mine


def test_a_stalled_rollout_is_reported() -> None:
    from tritonpipeline.render import conditions

    deployment_status = {
        "conditions": [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "vision-7c9" has timed out progressing.',
            }
        ]
    }
    stalled = conditions.stalled_message(deployment_status)
    progressing, ready = conditions.ready_condition(2, 1, 1, 2, 3, stalled)
    assert (progressing["status"], progressing["reason"]) == ("False", "RolloutStalled")
    assert "timed out progressing" in progressing["message"] and "free GPU" in progressing["message"]
    assert ready["status"] == "False"
    assert (
        conditions.stalled_message(
            {"conditions": [{"type": "Progressing", "reason": "NewReplicaSetAvailable"}]}
        )
        is None
    )


@pytest.mark.parametrize(
    ("modes", "replicas", "ok", "reason"),
    [
        (["ReadWriteOnce"], 2, False, "ReadWriteOnceClaim"),
        (["ReadWriteOncePod"], 3, False, "ReadWriteOnceClaim"),
        (["ReadWriteOnce"], 1, True, "ClaimMountable"),
        (["ReadOnlyMany"], 4, True, "ClaimMountable"),
        (["ReadWriteOnce", "ReadWriteMany"], 4, True, "ClaimMountable"),
    ],
)
def test_model_claim_mountable_by_every_replica(modes, replicas, ok, reason) -> None:
    from tritonpipeline.render import storage

    tp = parse_pipeline(cluster_doc(replicas=replicas))
    c = storage.model_source(tp, {"spec": {"accessModes": modes}})
    assert c is not None and (c.ok, c.reason) == (ok, reason)


def test_model_source_for_a_missing_claim_and_other_sources() -> None:
    from tritonpipeline.render import storage

    tp = parse_pipeline(cluster_doc())
    found = storage.model_source(tp, None)
    assert found is not None and found.reason == "ClaimNotFound"
    doc = cluster_doc()
    doc["spec"]["modelRepository"]["uri"] = "s3://bucket/models"
    assert storage.model_source(parse_pipeline(doc), None) is None


def test_container_errors_reach_the_pod_status() -> None:
    """The kubelet puts a failed container's log tail in its termination message only with
    FallbackToLogsOnError: the operator reads a missing model directory from there (no pods/log right)."""
    pod = pod_spec(cluster_doc())
    for c in [*pod["initContainers"], *pod["containers"]]:
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError", c["name"]
