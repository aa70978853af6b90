"""The Helm chart on real parts: helm built from Go modules (`make helm`), every rendered object checked by
the real kube-apiserver (server-side dry run, strict field validation), `helm install` into it, and the
operator run as a subprocess with exactly the chart's RBAC: the chart's ServiceAccount token is its only
credential. It reconciles a pipeline, and the same identity is refused outside its grant.
Here the tests on real components; the pure ones are in tests/unit/test_chart.py."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.gotools import ToolError, ToolUnavailable, ensure_tool
from harness.helm import CHART, CI_VALUES, Helm, by_kind, deployment_of
from harness.kubeapi import (
    CRD_NAME,
    dry_run_apply,
    ensure_namespace,
    get_object,
    http_status,
    install_crd_file,
    service_account_token,
    wait_established,
)
from harness.kubeconfig import kube_for, token_kubeconfig
from harness.operator_process import ChartOperator
from harness.wait import wait_for
from helpers import ROOT, condition, example
from support.chart import CRD_FILE, values_keys
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render.manifests import render_children
from tritonpipeline.render.security_context import OPENSHIFT_SCC_API
from tritonpipeline.render.webhook_configuration import WebhookSettings
from tritonpipeline.settings import DEFAULT_ASSEMBLER_IMAGE, Settings
from tritonpipeline.spec import parse_pipeline

KOPF_CRD_FILE = ROOT / "charts" / "triton-pipeline" / "crds" / "kopfpeerings.kopf.dev.yaml"


API = "serving.tritonpipeline.io/v1alpha1"


WEBHOOK_API = "admissionregistration.k8s.io/v1"


SELECTOR = "serving.tritonpipeline.io/pipeline"


SCENARIOS = {p.name.removesuffix("-values.yaml"): p for p in CI_VALUES}


ALERT_VALUES = ("pipelineNotReady", "queueTime", "reconcileErrors", "loopStalled")


RULE_ON = [
    "prometheusRule.enabled=true",
    'prometheusRule.operatorSelector=job="tp"',
]  # no ServiceMonitor needed


ALERTS = {
    "pipelineNotReady": "TritonPipelineNotReady",
    "queueTime": "TritonPipelineQueueTimeHigh",
    "reconcileErrors": "TritonPipelineReconcileErrors",
    "loopStalled": "TritonPipelineOperatorLoopStalled",
}


# The operator's rules, derived from its calls (see templates/_helpers.tpl, "rules"); any change to
# the chart's RBAC must change this on purpose.
OPERATOR_RULES = [
    {"apiGroups": ["serving.tritonpipeline.io"], "resources": ["tritonpipelines"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["serving.tritonpipeline.io"], "resources": ["tritonpipelines/status"], "verbs": ["patch"]},
    {"apiGroups": ["serving.tritonpipeline.io"], "resources": ["tritonpipelines/finalizers"],
     "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["services"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["apps"], "resources": ["deployments"],
     "verbs": ["get", "list", "watch", "create", "patch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
     "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["networking.istio.io"], "resources": ["destinationrules"],
     "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes", "grpcroutes"],
     "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["gateway.envoyproxy.io"], "resources": ["backendtrafficpolicies"],
     "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["gateway.nginx.org"], "resources": ["upstreamsettingspolicies"],
     "verbs": ["get", "create", "patch", "delete"]},
]  # fmt: skip


# where the operator may use KEDA (autoscaling.keda: true, or auto where helm finds KEDA's CRD)
KEDA_RULE = {
    "apiGroups": ["keda.sh"],
    "resources": ["scaledobjects"],
    "verbs": ["get", "create", "patch", "delete"],
}


KEDA_API = "keda.sh/v1alpha1/ScaledObject"  # as helm's .Capabilities.APIVersions holds it


KOPF_CRDS = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
             "verbs": ["list", "watch"]}  # fmt: skip


# which implementation serves a pipeline's Gateway (its GatewayClass's controllerName): get only
GATEWAYS = {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["gateways", "gatewayclasses"],
            "verbs": ["get"]}  # fmt: skip


# whether the node of a pipeline's only ready pod is being drained (cordoned): get only
NODES = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}


KOPF_NAMESPACES = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}


# the admission webhook's registration: exactly the configuration the chart creates (helm deletes it)
WEBHOOK_RULE = {"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"],
                "resourceNames": ["rel-triton-pipeline"], "verbs": ["get", "patch"]}  # fmt: skip


# kopf's peering (docs/how-to/operate.md): watch the peering objects, keep this release's one
def peering_rules(resource: str) -> list[dict[str, Any]]:
    return [
        {"apiGroups": ["kopf.dev"], "resources": [resource], "verbs": ["list", "watch"]},
        {"apiGroups": ["kopf.dev"], "resources": [resource], "resourceNames": ["rel-triton-pipeline"],
         "verbs": ["get", "patch"]},
    ]  # fmt: skip


# the self-signed webhook certificate the replicas share: exactly the Secret the chart creates empty
CERT_SECRET_RULE = {"apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": ["rel-triton-pipeline-webhook-cert"],
                    "verbs": ["get", "update"]}  # fmt: skip


# the access review (security.reviewAuthors, on by default): the key that signs its records, its mutating
# webhook, and the question it asks about each pipeline's author
REVIEW_KEY_RULE = {"apiGroups": [""], "resources": ["secrets"],
                   "resourceNames": ["rel-triton-pipeline-review-key"],
                   "verbs": ["get", "update"]}  # fmt: skip


REVIEW_RULES = [
    {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
     "resourceNames": ["rel-triton-pipeline"], "verbs": ["get", "patch"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]  # fmt: skip


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture
def helm(helm_binary: Path, tmp_path: Path) -> Helm:
    """helm without a cluster (lint, template)."""
    return Helm(helm_binary, tmp_path / "helm-home")


@pytest.fixture(scope="session")
def admin(control_plane: Any) -> Kube:
    return Kube(control_plane.api_client(), "test-admin")


@pytest.fixture
def cluster_helm(helm_binary: Path, control_plane: Any, tmp_path: Path) -> Helm:
    return Helm(helm_binary, tmp_path / "helm-home", control_plane.kubeconfig)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def pipeline_doc(name: str, namespace: str, source: str = "fanout") -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / f"{source}.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    return doc


@pytest.mark.helm
def test_every_key_the_schema_lets_go_renders_without_it(helm):
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    dropped = [k for k, _, required in values_keys(values, schema) if not required]
    assert len(dropped) > 20
    for key in dropped:
        assert helm.template("rel", "ops", set_values=[f"{key}=null"]), key


# --- helm lint and template -----------------------------------------------------------------------------


@pytest.mark.helm
@pytest.mark.parametrize("scenario", ["default", *SCENARIOS])
def test_helm_lint_strict(helm, scenario):
    out = helm.lint([SCENARIOS[scenario]] if scenario != "default" else [])
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.helm
@pytest.mark.parametrize(
    ("set_values", "message"),
    [
        (["replicaCount=0"], "at '/replicaCount': minimum: got 0, want 1"),
        (["image.repository="], "image.repository must not be empty"),
        (["image.repository=  "], "image.repository must not be empty"),
        (["watchNamespaces={team-a}"], "conflicts with rbac.clusterWide=true"),
        (["rbac.clusterWide=false"], "rbac.clusterWide=false needs watchNamespaces"),
        (
            ["serviceAccount.create=false"],
            "serviceAccount.name is required when serviceAccount.create is false",
        ),
        (["operator.port=http"], "at '/operator/port': got string, want integer"),
        (["rbac.clusterwide=true"], "additional properties 'clusterwide' not allowed"),
        (["watchNamespaces={a,a}", "rbac.clusterWide=false"], "items at 0 and 1 are equal"),
        (["operator.metricsPort=8080"], "operator.port and operator.metricsPort are both 8080"),
        (["webhook.port=8081"], "webhook.port 8081 is also the liveness or metrics port"),
        (["webhook.failurePolicy=fail"], "at '/webhook/failurePolicy'"),
        (["webhook.timeoutSeconds=31"], "at '/webhook/timeoutSeconds': maximum"),
        (
            ["webhook.enabled=false", "webhook.certManager.enabled=true"],
            "webhook.certManager.enabled needs webhook.enabled",
        ),
        (["webhook.certManager.issuerRef.name=ca"], "webhook.certManager.issuerRef needs name and kind"),
        (["operator.logFormat=text"], "at '/operator/logFormat'"),
        (
            ["metrics.operatorServiceMonitor.enabled=true"],
            "operatorServiceMonitor.enabled with networkPolicy.enabled needs networkPolicy.metricsFrom",
        ),
        (["security.allowedServiceAccounts={ML/Reader}"], "at '/security/allowedServiceAccounts/0'"),
        (["security.allowedImageRegistries={nvcr.io/nvidia}"], "at '/security/allowedImageRegistries/0'"),
        (
            ["metrics.operatorServiceMonitor.enabled=true", "metrics.service.enabled=false"],
            "metrics.operatorServiceMonitor.enabled needs metrics.service.enabled",
        ),
        (["fullnameOverride=1op"], 'the release name makes the name "1op", which Services cannot take'),
        (["fullnameOverride=op.x"], 'the release name makes the name "op.x", which Services cannot take'),
        (
            ["commonLabels.app\\.kubernetes\\.io/part-of=mine"],
            "commonLabels and podLabels may not set app.kubernetes.io/part-of: the chart sets it",
        ),
        (["podLabels.app\\.kubernetes\\.io/instance=other"], "may not set app.kubernetes.io/instance"),
        (
            ["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.scrapeTimeout=20s"],
            'metrics.serviceMonitor.scrapeTimeout "20s" is longer than its interval "15s"',
        ),
        (  # 5ms is milliseconds, not minutes
            ["metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=5ms"],
            'scrapeTimeout "10s" is longer than its interval "5ms"',
        ),
        (["metrics.serviceMonitor.interval=15"], "at '/metrics/serviceMonitor/interval'"),
        (["image.repository=ghcr.io/org/op:1.0"], "at '/image/repository'"),  # the tag goes in image.tag
        (["assemblerImage=ghcr.io/Org/assembler"], "at '/assemblerImage'"),
        (  # a digest is one image's: the assembler's is not derived from the operator's
            ["image.digest=sha256:" + "0" * 64],
            "image.digest pins the operator image only: set assemblerImage too, the assembler image by "
            "digest (ghcr.io/tritonpipeline/operator-assembler@sha256:...)",
        ),
        (["terminationGracePeriodSeconds=9"], "terminationGracePeriodSeconds 9 is too short"),
        # the alerts (prometheusRule) and the dashboard
        (
            ["prometheusRule.enabled=true"],
            "prometheusRule reads the operator's own metrics: enable metrics.operatorServiceMonitor",
        ),
        (
            ["prometheusRule.enabled=true", *(f"prometheusRule.{a}.enabled=false" for a in ALERT_VALUES)],
            "prometheusRule.enabled with every alert off",
        ),
        (
            [*RULE_ON, "metrics.serviceMonitor.enabled=true", "prometheusRule.queueTime.window=20s"],
            'prometheusRule.queueTime.window "20s" holds fewer than two scrapes of '
            'metrics.serviceMonitor.interval "15s"',
        ),
        ([*RULE_ON, "prometheusRule.loopStalled.window=0s"], 'prometheusRule.loopStalled.window is "0s"'),
        (
            [*RULE_ON, "prometheusRule.queueTime.thresholdMicroseconds=0"],
            "at '/prometheusRule/queueTime/thresholdMicroseconds'",
        ),
        ([*RULE_ON, "prometheusRule.queueTime.for=10"], "at '/prometheusRule/queueTime/for'"),
        ([*RULE_ON, "prometheusRule.runbookUrl=docs/operate.html"], "at '/prometheusRule/runbookUrl'"),
        ([*RULE_ON, "prometheusRule.alertLabels.severity=page"], "invalid propertyName 'severity'"),
        (
            [*RULE_ON, "prometheusRule.reconcileErrors.severity=not ok"],
            "at '/prometheusRule/reconcileErrors/severity'",
        ),
        (
            ["dashboard.enabled=true", "dashboard.label=app.kubernetes.io/name"],
            'dashboard.label "app.kubernetes.io/name" is a label the chart (or commonLabels) already sets',
        ),
        (["dashboard.enabled=true", "dashboard.label="], "at '/dashboard/label'"),
        (["webhook=null"], "missing property 'webhook'"),
        (["livenessProbe.periodSeconds=null"], "at '/livenessProbe': missing property 'periodSeconds'"),
        (["securityContext=null"], "missing property 'securityContext'"),
        # the operator's pod stays within Pod Security "restricted"
        (["securityContext.allowPrivilegeEscalation=true"], "at '/securityContext/allowPrivilegeEscalation'"),
        (["securityContext.capabilities.add={SYS_ADMIN}"], "at '/securityContext/capabilities/add/0'"),
        (["securityContext.capabilities.drop={}"], "at '/securityContext/capabilities/drop'"),
        (
            ["podSecurityContext.seccompProfile.type=Unconfined"],
            "at '/podSecurityContext/seccompProfile/type'",
        ),
        (["securityContext.seccompProfile.type=Unconfined"], "at '/securityContext/seccompProfile/type'"),
        (["securityContext.procMount=Unmasked"], "at '/securityContext/procMount'"),
        (["podSecurityContext.seLinuxOptions.user=root"], "at '/podSecurityContext/seLinuxOptions/user'"),
        (
            ["podSecurityContext.sysctls[0].name=kernel.msgmax", "podSecurityContext.sysctls[0].value=1"],
            "at '/podSecurityContext/sysctls/0/name'",
        ),
    ],
)
def test_impossible_values_fail_with_a_clear_message(helm, set_values, message):
    with pytest.raises(ToolError) as err:
        helm.template("rel", "ops", set_values=set_values)
    assert message in str(err.value)


@pytest.mark.helm
@pytest.mark.parametrize(("release", "namespace"), [("a" * 45, "ops"), ("true", "2024"), ("on", "null")])
def test_names_and_namespaces_stay_strings_and_services_fit(helm, tmp_path, release, namespace):
    """A release or namespace YAML reads as a number, boolean or null is written quoted (kubectl refused
    `namespace: 2024`), and a long release name still gives Service names of 63 characters at most."""
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps({"rbac": {"clusterWide": False}, "watchNamespaces": [namespace]}))
    docs = helm.template(release, namespace, values=[values])
    for doc in docs:
        meta = doc["metadata"]
        assert all(isinstance(v, str) for v in meta.get("labels", {}).values()), meta
        assert isinstance(meta.get("namespace", ""), str), meta
        for subject in doc.get("subjects", []):
            assert isinstance(subject.get("namespace", ""), str), subject
    services = [d["metadata"]["name"] for d in docs if d["kind"] == "Service"]
    assert services and all(re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", n) for n in services), services
    assert len(set(services)) == len(services)


@pytest.mark.helm
def test_rbac_create_false_renders_no_rbac_at_all(helm):
    kinds = {d["kind"] for d in helm.template("rel", "ops", set_values=["rbac.create=false"])}
    assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, kinds


@pytest.mark.helm
def test_default_render(helm):
    docs = helm.template("rel", "ops")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterKopfPeering", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
        "ClusterRoleBinding", "ClusterRoleBinding", "Deployment", "MutatingWebhookConfiguration",
        "NetworkPolicy", "PodDisruptionBudget", "Role", "Role", "RoleBinding", "RoleBinding", "Secret",
        "Secret", "Service", "Service", "ServiceAccount", "ValidatingWebhookConfiguration",
    ]  # fmt: skip
    # the access review is on: its key's Secret, its mutating webhook, and the SubjectAccessReviews
    env = {
        e["name"]: e.get("value")
        for e in deployment_of(docs)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TRITONPIPELINE_REVIEW_AUTHORS"] == "true"
    assert env["TRITONPIPELINE_REVIEW_KEY_STORE"] == "ops/rel-triton-pipeline-review-key"
    assert {"rel-triton-pipeline-review-key", "rel-triton-pipeline-webhook-cert"} == {
        d["metadata"]["name"] for d in by_kind(docs, "Secret")
    }
    rules = [r for d in by_kind(docs, "ClusterRole") for r in d["rules"]]
    assert {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    } in rules
    dep = deployment_of(docs)
    assert dep["metadata"]["namespace"] == "ops"
    spec = dep["spec"]
    # highly available: two pods, a new one ready before an old one stops, on different nodes if possible
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pod = spec["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": spec["selector"]}
    (peering,) = by_kind(docs, "ClusterKopfPeering")  # kopf's peering object, named like the release
    (c,) = pod["containers"]
    assert c["image"] == DEFAULT_ASSEMBLER_IMAGE.replace("-assembler:", ":")
    assert c["command"] == [
        "tritonpipeline", "run", "--liveness", "http://0.0.0.0:8080/healthz",
        "--metrics", "http://0.0.0.0:8081", "--log-format", "full",
    ]  # fmt: skip
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["TRITONPIPELINE_PEERING"] == peering["metadata"]["name"] == "rel-triton-pipeline"
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]
    # the Triton pods' init container: the minimal assembler image (the Dockerfile's target assembler)
    assert env["TRITONPIPELINE_ASSEMBLER_IMAGE"] == DEFAULT_ASSEMBLER_IMAGE
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # a stopping pod serves the webhook on while the Service's endpoints drop it
    assert c["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    assert c["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 8081, "protocol": "TCP"},
        {"name": "webhook", "containerPort": 9443, "protocol": "TCP"},
    ]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert set(c["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(
        c["resources"]["limits"]
    )
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    (sa,) = by_kind(docs, "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"] == "rel-triton-pipeline"
    # the operator pod is never selected by a pipeline's Service (name=triton-pipeline, instance=PIPELINE)
    selector = spec["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == "triton-pipeline-operator"
    # a pipeline's NetworkPolicy lets exactly these pods read its metrics (the status poll)
    assert env["TRITONPIPELINE_OPERATOR_NAMESPACE"] == "ops"
    labels = dict(item.split("=", 1) for item in env["TRITONPIPELINE_OPERATOR_LABELS"].split(","))
    assert labels == selector == {k: spec["template"]["metadata"]["labels"][k] for k in selector}
    (svc,) = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-triton-pipeline-metrics"]
    assert svc["spec"]["selector"] == selector
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert not by_kind(docs, "ServiceMonitor")


def rules_of(docs: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return [r for d in by_kind(docs, kind) if d["metadata"]["name"] == name for r in d["rules"]]


@pytest.mark.helm
def test_rbac_cluster_wide_is_exactly_the_derived_rules(helm):
    docs = helm.template("rel", "ops", [SCENARIOS["cluster-wide"]])
    assert rules_of(docs, "ClusterRole", "rel-triton-pipeline") == OPERATOR_RULES
    assert rules_of(docs, "ClusterRole", "rel-triton-pipeline-kopf") == [
        KOPF_CRDS, GATEWAYS, NODES, *peering_rules("clusterkopfpeerings"),
    ]  # fmt: skip
    # in the release's namespace: the shared webhook certificate and the review key only
    roles = by_kind(docs, "Role")
    assert {r["metadata"]["namespace"] for r in roles} == {"ops"}
    assert sorted((r["rules"] for r in roles), key=str) == sorted(
        [[CERT_SECRET_RULE], [REVIEW_KEY_RULE]], key=str
    )
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["roleRef"]["name"] for b in bindings) == sorted(r["metadata"]["name"] for r in roles)
    for binding in by_kind(docs, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "rel-triton-pipeline", "namespace": "ops"}
        ]
    assert "-n" not in deployment_of(docs)["spec"]["template"]["spec"]["containers"][0]["command"]


@pytest.mark.helm
def test_rbac_namespaced_is_a_role_per_namespace(helm):
    docs = helm.template("rel", "ops", [SCENARIOS["namespaced"]])
    roles = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "rel-triton-pipeline"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert role["rules"] == OPERATOR_RULES + peering_rules("kopfpeerings")
    peerings = by_kind(docs, "KopfPeering")  # one per watched namespace, where kopf looks for it
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert {p["metadata"]["name"] for p in peerings} == {"rel-triton-pipeline"}
    assert not by_kind(docs, "ClusterKopfPeering")
    bound = sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding"))
    assert bound == ["ops", "ops", "team-a", "team-b"]  # ops: the webhook certificate, the review key
    # the only cluster-wide grants left: kopf's read-only bookkeeping, the webhook's one configuration
    assert sorted(c["metadata"]["name"] for c in by_kind(docs, "ClusterRole")) == [
        "rel-triton-pipeline-kopf", "rel-triton-pipeline-webhook",
    ]  # fmt: skip
    assert rules_of(docs, "ClusterRole", "rel-triton-pipeline-webhook") == [WEBHOOK_RULE, *REVIEW_RULES]
    assert rules_of(docs, "ClusterRole", "rel-triton-pipeline-kopf") == [
        KOPF_CRDS, GATEWAYS, NODES, KOPF_NAMESPACES,
    ]  # fmt: skip
    command = deployment_of(docs)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == ["-n", "team-a", "-n", "team-b"]


@pytest.mark.helm
@pytest.mark.parametrize(
    ("keda", "api_versions", "granted"),
    [("auto", [], False), ("auto", [KEDA_API], True), ("true", [], True), ("false", [KEDA_API], False)],
    ids=["auto", "auto-keda", "true", "false-keda"],
)
@pytest.mark.parametrize("scenario", ["cluster-wide", "namespaced"])
def test_scaled_objects_are_granted_only_where_the_operator_uses_keda(
    helm, keda, api_versions, granted, scenario
):
    """Least privilege for the default autoscaling engine `auto`: the operator holds the ScaledObject
    rule only where it may use KEDA (autoscaling.keda: where helm finds KEDA's CRD, always, or never),
    and TRITONPIPELINE_USE_KEDA tells it the same, so it never tries what its RBAC denies; the
    Prometheus KEDA queries is the chart's value."""
    docs = helm.template(
        "rel",
        "ops",
        [SCENARIOS[scenario]],
        set_values=[f"autoscaling.keda={keda}", "autoscaling.prometheusAddress=http://prom.mon.svc:9090"],
        api_versions=api_versions,
    )
    kinds = ("ClusterRole", "Role") if scenario == "cluster-wide" else ("Role",)
    rules = [
        rule
        for d in docs
        if d["kind"] in kinds and d["metadata"]["name"] == "rel-triton-pipeline"
        for rule in d["rules"]
    ]
    assert rules and (KEDA_RULE in rules) == granted
    env = env_of(docs)
    assert env["TRITONPIPELINE_USE_KEDA"] == ("true" if granted else "false")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRITONPIPELINE_USE_KEDA", env["TRITONPIPELINE_USE_KEDA"])
        m.setenv("TRITONPIPELINE_PROMETHEUS_ADDRESS", env["TRITONPIPELINE_PROMETHEUS_ADDRESS"])
        settings = Settings.from_env()
    assert settings.use_keda is granted and settings.prometheus_address == "http://prom.mon.svc:9090"


RBAC_DOC = ROOT / "docs" / "reference" / "install.md"


def rbac_doc_rows() -> list[tuple[set[str], set[str]]]:
    """The install page's permission table: (resources named in backticks, verbs) per row."""
    rows = []
    for line in RBAC_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[1] and "---" not in cells[1]:
            named = {n for n in re.findall(r"`([a-z/]+)`", cells[0])}
            rows.append((named, {v.strip() for v in cells[1].split(",")}))
    return rows


@pytest.mark.helm
def test_the_install_page_permission_table_is_the_charts_rbac(helm):
    """docs/reference/install.md lists what the operator may do; it went stale before (pods,
    persistentvolumeclaims, finalizers and the Gateway reads were granted and missing from it)."""
    rules = [
        rule
        for scenario in ("cluster-wide", "namespaced")
        for doc in helm.template("rel", "ops", [SCENARIOS[scenario]], api_versions=[KEDA_API])
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
    ]
    rows = rbac_doc_rows()
    assert len(rows) > 10, "the permission table was not found"
    for rule in rules:
        assert any(
            set(rule["resources"]) <= named and set(rule["verbs"]) == verbs for named, verbs in rows
        ), f"{rule} has no row with exactly its verbs in {RBAC_DOC.name}"
    for named, verbs in rows:
        for resource in named:
            granted = set().union(*(set(r["verbs"]) for r in rules if resource in r["resources"]))
            assert verbs <= granted, (
                f"{RBAC_DOC.name} grants {resource} {verbs - granted}, the chart does not"
            )


@pytest.mark.helm
@pytest.mark.parametrize("scenario", ["default", *SCENARIOS])
def test_secrets_create_only_and_no_wildcards_anywhere(helm, scenario):
    """The operator may create a Secret (a pipeline's admin key) but never read, change or delete one,
    except those the chart creates empty (the shared webhook certificate, the review key): get and update
    of each by its name only."""
    docs = helm.template("rel", "ops", [SCENARIOS[scenario]] if scenario != "default" else [])
    secrets = [d["metadata"]["name"] for d in by_kind(docs, "Secret") if "data" not in d]
    assert len(secrets) == len(by_kind(docs, "Secret")) <= 2
    create = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}
    shared = [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [name], "verbs": ["get", "update"]}
        for name in secrets
    ]
    for doc in docs:
        for rule in doc.get("rules", []):
            assert "*" not in rule["resources"] + rule["verbs"]
            if "secrets" in rule["resources"]:
                assert rule == create or rule in shared, rule


@pytest.mark.helm
def test_servicemonitor_only_when_enabled(helm):
    docs = helm.template("rel", "ops", [SCENARIOS["servicemonitor"]])
    (sm,) = [d for d in by_kind(docs, "ServiceMonitor") if d["metadata"]["name"].endswith("-tritonserver")]
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["namespaceSelector"] == {"any": True}
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"  # the Triton Services' port (8002)
    ns = helm.template(
        "rel", "ops", [SCENARIOS["servicemonitor"], SCENARIOS["namespaced"]]
    )  # namespaced: only the watched namespaces are scraped
    assert by_kind(ns, "ServiceMonitor")[0]["spec"]["namespaceSelector"] == {
        "matchNames": ["team-a", "team-b"]
    }
    # any Prometheus duration, written as a string (1m30s was refused; a bare 0 would be an integer)
    sets = ["metrics.serviceMonitor.interval=1m30s", "metrics.serviceMonitor.scrapeTimeout=1m"]
    docs = helm.template("rel", "ops", [SCENARIOS["servicemonitor"]], set_values=sets)
    (sm,) = [d for d in by_kind(docs, "ServiceMonitor") if d["metadata"]["name"].endswith("-tritonserver")]
    assert (sm["spec"]["endpoints"][0]["interval"], sm["spec"]["endpoints"][0]["scrapeTimeout"]) == (
        "1m30s",
        "1m",
    )


@pytest.mark.helm
def test_operator_servicemonitor_scrapes_the_metrics_service(helm):
    """The operator's own ServiceMonitor selects the metrics Service by its labels and scrapes its
    `metrics` port, which is the container port the operator serves /metrics on."""
    values = [
        "metrics.operatorServiceMonitor.enabled=true",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
        "operator.logFormat=json",
    ]
    docs = helm.template("rel", "ops", set_values=values)
    (sm,) = by_kind(docs, "ServiceMonitor")  # the Triton pods' one stays off
    assert sm["metadata"]["name"] == "rel-triton-pipeline-operator"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    (svc,) = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-triton-pipeline-metrics"]
    assert all(svc["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
    (c,) = deployment_of(docs)["spec"]["template"]["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in c["ports"]
    assert c["command"][c["command"].index("--log-format") + 1] == "json"
    both = helm.template("rel", "ops", [SCENARIOS["servicemonitor"]], set_values=values[:2])
    assert sorted(d["metadata"]["name"] for d in by_kind(both, "ServiceMonitor")) == [
        "rel-triton-pipeline-operator", "rel-triton-pipeline-tritonserver",
    ]  # fmt: skip


@pytest.mark.helm
def test_alerts_and_dashboard_only_when_enabled(helm):
    """Off by default; ci/monitoring-values.yaml renders the PrometheusRule with every alert (each with its
    severity, summary, description and runbook section; tests/component/test_alert_rules.py runs them through
    promtool) and the dashboard's ConfigMap, labelled for Grafana's sidecar, holding the shipped JSON."""
    assert not by_kind(helm.template("rel", "ops"), "PrometheusRule")
    assert not by_kind(helm.template("rel", "ops"), "ConfigMap")
    docs = helm.template("rel", "ops", [SCENARIOS["monitoring"]])
    (rule,) = by_kind(docs, "PrometheusRule")
    assert (
        rule["metadata"]["namespace"] == "ops"
        and rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    )
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert [r["alert"] for r in rules] == list(ALERTS.values())
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical") and r["labels"]["team"] == "ml"
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        anchor = r["annotations"]["runbook_url"].split("#")[1]
        assert anchor == f"alert-{r['alert'].lower()}"
        # the runbook's section exists on the page the link names
        assert f"### {r['alert']}" in (ROOT / "docs" / "how-to" / "operate.md").read_text()
    (queue,) = [r for r in rules if r["alert"] == "TritonPipelineQueueTimeHigh"]
    assert queue["expr"].endswith(") > 50000") and queue["for"] == "10m"
    (board,) = by_kind(docs, "ConfigMap")
    assert board["metadata"]["namespace"] == "monitoring"
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["annotations"] == {"grafana_folder": "Triton"}
    shipped = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    assert json.loads(board["data"]["tritonpipeline.json"]) == shipped
    # the sidecar's label is configurable; an alert can be left out
    sets = [
        "dashboard.label=my_dashboards",
        "dashboard.labelValue=yes",
        "prometheusRule.loopStalled.enabled=false",
    ]
    docs = helm.template("rel", "ops", [SCENARIOS["monitoring"]], set_values=sets)
    (board,) = by_kind(docs, "ConfigMap")
    assert (
        board["metadata"]["labels"]["my_dashboards"] == "yes"
        and "grafana_dashboard" not in board["metadata"]["labels"]
    )
    (rule,) = by_kind(docs, "PrometheusRule")
    assert [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]] == list(ALERTS.values())[:3]


@pytest.mark.helm
def test_custom_values_render(helm):
    docs = helm.template("rel", "ops", [SCENARIOS["custom-resources"]])
    dep = deployment_of(docs)
    assert dep["metadata"]["name"] == "tp-operator"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"].startswith("registry.example.com/ml/tritonpipeline@sha256:")
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["TRITONPIPELINE_ASSEMBLER_IMAGE"] == "registry.example.com/ml/tritonpipeline-assembler:0.1.0"
    assert env["TRITONPIPELINE_RESYNC_SECONDS"] == "30" and env["LOG_FORMAT"] == "plain"
    assert env["TRITONPIPELINE_CONFIGMAP_MAX_BYTES"] == "524288"
    # helm merges maps: the values' limits, and the default's ephemeral-storage the values do not set
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "1Gi"}
    assert pod["serviceAccountName"] == "tp-operator-sa"
    assert pod["tolerations"][0]["key"] == "dedicated" and pod["nodeSelector"] == {
        "kubernetes.io/os": "linux"
    }
    assert all(d["metadata"]["labels"]["cost-center"] == "ml" for d in docs)


@pytest.mark.helm
def test_what_pod_security_restricted_allows_renders(helm, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps({
        "podSecurityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "operator.json"},
                               "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
        "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}},
    }))  # fmt: skip
    pod = deployment_of(helm.template("rel", "ops", [values]))["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert pod["securityContext"]["sysctls"] == [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]
    assert pod["containers"][0]["securityContext"]["capabilities"]["add"] == ["NET_BIND_SERVICE"]


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    (c,) = deployment_of(docs)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}


@pytest.mark.helm
def test_the_operator_pod_admits_only_the_webhook_and_the_metrics_readers(helm):
    """The default NetworkPolicy selects the operator pod and opens only the webhook's container port (to
    the API server, from anywhere); the metrics port only to the configured peers; none when disabled."""
    docs = helm.template("rel", "ops")
    (policy,) = by_kind(docs, "NetworkPolicy")
    pod = deployment_of(docs)["spec"]["template"]
    assert all(
        pod["metadata"]["labels"][k] == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items()
    )
    (c,) = pod["spec"]["containers"]
    webhook_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "webhook")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": webhook_port, "protocol": "TCP"}]}]
    peer = {"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}
    docs = helm.template(
        "rel",
        "ops",
        set_values=["networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring"],
    )
    (policy,) = by_kind(docs, "NetworkPolicy")
    assert policy["spec"]["ingress"][1] == {"from": [peer], "ports": [{"port": 8081, "protocol": "TCP"}]}
    # the webhook port narrowed to the API server's addresses (issue 54: open to every source)
    control_plane = {"ipBlock": {"cidr": "10.0.0.0/28"}}
    docs = helm.template("rel", "ops", set_values=["networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/28"])
    (policy,) = by_kind(docs, "NetworkPolicy")
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": webhook_port, "protocol": "TCP"}], "from": [control_plane]}
    ]
    assert (
        by_kind(helm.template("rel", "ops", set_values=["networkPolicy.enabled=false"]), "NetworkPolicy")
        == []
    )


@pytest.mark.helm
def test_the_init_container_runs_the_assembler_image_beside_the_operators(helm):
    """The Triton pods' init container image (TRITONPIPELINE_ASSEMBLER_IMAGE, which the operator puts in
    every pod template) is the Dockerfile's target assembler, named after the operator image: its
    repository with -assembler, its tag; assemblerImage names another, the operator image included."""

    def images(*values: str) -> tuple[str, str]:
        docs = helm.template("rel", "ops", set_values=list(values))
        (c,) = deployment_of(docs)["spec"]["template"]["spec"]["containers"]
        return c["image"], env_of(docs)["TRITONPIPELINE_ASSEMBLER_IMAGE"]

    # the defaults: values.yaml's repository at the chart's appVersion, and the operator's own default
    repository = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert images() == (f"{repository}:{app_version}", DEFAULT_ASSEMBLER_IMAGE)
    mirrored = ["image.repository=registry.example.com/ml/tritonpipeline", "image.tag=0.1.0-rc1"]
    assert images(*mirrored) == (
        "registry.example.com/ml/tritonpipeline:0.1.0-rc1",
        "registry.example.com/ml/tritonpipeline-assembler:0.1.0-rc1",
    )
    operator = "registry.example.com/ml/tritonpipeline:0.1.0-rc1"
    assert images(*mirrored, f"assemblerImage={operator}") == (operator, operator)
    # with a digest, the assembler's is given (a digest names one image): both pinned
    digest = "sha256:" + "ab" * 32
    pinned = f"registry.example.com/ml/tritonpipeline-assembler@sha256:{'cd' * 32}"
    assert images(*mirrored, f"image.digest={digest}", f"assemblerImage={pinned}") == (
        f"registry.example.com/ml/tritonpipeline@{digest}",
        pinned,
    )
    # what the operator reads from that variable and renders into each Triton pod's init container
    with pytest.MonkeyPatch.context() as m:
        for key, value in env_of(helm.template("rel", "ops", set_values=mirrored)).items():
            m.setenv(key, value)
        settings = Settings.from_env()
    doc = {**example("fanout", "pvc://models/triton"), "metadata": {"name": "vision", "namespace": "ml"}}
    tp = parse_pipeline(doc)
    (init,) = render_children(tp, compile_pipeline(tp), settings).deployment["spec"]["template"]["spec"][
        "initContainers"
    ]
    assert init["image"] == "registry.example.com/ml/tritonpipeline-assembler:0.1.0-rc1"
    assert init["args"][0] == "assemble"  # after the image's ENTRYPOINT, tritonpipeline


@pytest.mark.helm
def test_no_plain_env_value_looks_like_a_secret_to_linters(helm):
    """Linters' secret-in-env checks (kube-linter env-var-secret, checkov) flag a plain value under a name
    that says secret, password or token; the pull-secret names reach the operator under another name.
    The operator's own pull secrets stay the operator's (issue 54: the chart put them into every tenant
    pod); the Triton pods get only the assembler's, named per namespace."""
    own = ["imagePullSecrets[0].name=operator-registry"]
    docs = helm.template("rel", "ops", set_values=own)
    assert "TRITONPIPELINE_ASSEMBLER_IMAGE_PULL_REFS" not in env_of(docs)
    assert deployment_of(docs)["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "operator-registry"}
    ]
    docs = helm.template(
        "rel",
        "ops",
        set_values=[*own, "assemblerImagePullSecrets[0].name=ngc", "assemblerImagePullSecrets[1].name=m"],
    )
    (c,) = deployment_of(docs)["spec"]["template"]["spec"]["containers"]
    flagged = [
        e["name"] for e in c["env"] if "value" in e and re.search("secret|password|token", e["name"], re.I)
    ]
    assert flagged == []
    with pytest.MonkeyPatch.context() as m:
        for key, value in env_of(docs).items():
            m.setenv(key, value)
        assert Settings.from_env().assembler_pull_secrets == ("ngc", "m")


@pytest.mark.helm
def test_security_grants_reach_the_operator(helm):
    """The chart's grants become the operator's settings (off and empty by default)."""
    assert {k: v for k, v in env_of(helm.template("rel", "ops")).items() if "ALLOW" in k} == {
        "TRITONPIPELINE_ALLOW_PRIVILEGED": "false",
        "TRITONPIPELINE_ALLOWED_SERVICE_ACCOUNTS": "",
        "TRITONPIPELINE_ALLOWED_IMAGE_REGISTRIES": "",
        "TRITONPIPELINE_ALLOWED_HOSTS": "",
        "TRITONPIPELINE_ALLOWED_INGRESS_CLASSES": "",
        "TRITONPIPELINE_ALLOWED_METRICS_ADDRESSES": "",
        "TRITONPIPELINE_ALLOWED_TRACE_COLLECTORS": "",
    }
    assert env_of(helm.template("rel", "ops"))["TRITONPIPELINE_PRIVILEGED_NAMESPACES"] == ""
    granted = [
        "security.allowPrivilegedPipelines=true",
        "security.privilegedNamespaces={research,ml}",
        "security.allowedServiceAccounts={model-reader,ml/irsa}",
        "security.allowedImageRegistries={nvcr.io,registry.example.com:5000}",
    ]
    env = env_of(helm.template("rel", "ops", set_values=granted))
    with pytest.MonkeyPatch.context() as m:
        for key, value in env.items():
            m.setenv(key, value)
        settings = Settings.from_env()
    assert settings.allow_privileged is True
    assert settings.privileged_namespaces == ("research", "ml")
    assert settings.allowed_service_accounts == ("model-reader", "ml/irsa")
    assert settings.allowed_image_registries == ("nvcr.io", "registry.example.com:5000")


OPENSHIFT = "/".join(OPENSHIFT_SCC_API)  # what helm's .Capabilities.APIVersions holds on OpenShift


@pytest.mark.helm
@pytest.mark.parametrize(
    ("adapt", "api_versions", "ids"),
    [("auto", [], True), ("auto", [OPENSHIFT], False), ("force", [], False), ("disabled", [OPENSHIFT], True)],
    ids=["auto", "auto-openshift", "force", "disabled-openshift"],
)
def test_on_openshift_the_operator_pod_names_no_ids(helm, adapt, api_versions, ids):
    """OpenShift's restricted-v2 SCC refuses the image's uid 10001 (outside the namespace's range): where
    the chart sees OpenShift's API (or is told to), the operator's pod leaves its ids to the platform, and
    the setting reaches the operator, which decides the same for the Triton pods."""
    docs = helm.template(
        "rel", "ops", set_values=[f"security.adaptSecurityContext={adapt}"], api_versions=api_versions
    )
    pod = deployment_of(docs)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    named = {k for k in ("runAsUser", "runAsGroup", "fsGroup") if k in pod["securityContext"]}
    named |= {k for k in ("runAsUser", "runAsGroup") if k in container["securityContext"]}
    assert named == ({"runAsUser", "runAsGroup", "fsGroup"} if ids else set())
    # what restricted needs stays either way
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    with pytest.MonkeyPatch.context() as m:
        m.setenv(
            "TRITONPIPELINE_ADAPT_SECURITY_CONTEXT", env_of(docs)["TRITONPIPELINE_ADAPT_SECURITY_CONTEXT"]
        )
        assert Settings.from_env().adapt_security_context == adapt


@pytest.mark.helm
def test_webhook_render_fits_together(helm):
    """The Service forwards to the container's webhook port; the operator is told that Service, the
    configuration's name (created empty, so helm deletes it), the policy and the timeout; it may get and
    patch that one configuration only. Self-signed TLS by default: one empty Secret the replicas share it
    in, no cert-manager object."""
    docs = helm.template("rel", "ops", set_values=["webhook.failurePolicy=Fail", "webhook.timeoutSeconds=5"])
    env = env_of(docs)
    (svc,) = [s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "rel-triton-pipeline-webhook"]
    assert svc["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert svc["spec"]["selector"] == deployment_of(docs)["spec"]["selector"]["matchLabels"]
    assert env["TRITONPIPELINE_WEBHOOK_SERVICE"] == "ops/rel-triton-pipeline-webhook:443"
    assert env["TRITONPIPELINE_WEBHOOK_LISTEN"] == "0.0.0.0:9443"
    assert (env["TRITONPIPELINE_WEBHOOK_FAILURE_POLICY"], env["TRITONPIPELINE_WEBHOOK_TIMEOUT_SECONDS"]) == (
        "Fail", "5",
    )  # fmt: skip
    assert "TRITONPIPELINE_WEBHOOK_CERT_DIR" not in env
    settings = WebhookSettings.from_env(env)  # the operator takes what the chart gives it
    assert "rel-triton-pipeline-webhook.ops.svc" in settings.server_names()  # the self-signed SANs
    (secret,) = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].endswith("-cert")]
    assert settings.shared_cert == f"ops/{secret['metadata']['name']}" and "data" not in secret  # shared
    (vwc,) = by_kind(docs, "ValidatingWebhookConfiguration")
    assert vwc["metadata"]["name"] == env["TRITONPIPELINE_WEBHOOK_CONFIGURATION"] == "rel-triton-pipeline"
    assert "webhooks" not in vwc and "annotations" not in vwc["metadata"]
    assert rules_of(docs, "ClusterRole", "rel-triton-pipeline-webhook") == [WEBHOOK_RULE, *REVIEW_RULES]
    (mwc,) = by_kind(docs, "MutatingWebhookConfiguration")  # the access review's, filled the same way
    assert mwc["metadata"]["name"] == vwc["metadata"]["name"] and "webhooks" not in mwc
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
    off = helm.template("rel", "ops", set_values=["webhook.enabled=false"])
    assert not by_kind(off, "ValidatingWebhookConfiguration")
    assert not [k for k in env_of(off) if k.startswith("TRITONPIPELINE_WEBHOOK_")]
    assert "rel-triton-pipeline-webhook" not in [d["metadata"]["name"] for d in off]
    assert not by_kind(off, "Secret") and not by_kind(off, "Role")


@pytest.mark.helm
def test_webhook_with_cert_manager(helm):
    """The Certificate covers the Service name the operator registers, its Secret is mounted where the
    operator reads it, and cert-manager's CA injector is pointed at it; a given issuer replaces the chart's
    self-signed Issuer."""
    docs = helm.template("rel", "ops", set_values=["webhook.certManager.enabled=true"])
    assert [s["metadata"]["name"] for s in by_kind(docs, "Secret")] == ["rel-triton-pipeline-review-key"]
    assert "TRITONPIPELINE_WEBHOOK_SHARED_CERT" not in env_of(docs)
    (cert,) = by_kind(docs, "Certificate")
    (issuer,) = by_kind(docs, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    assert cert["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    env = env_of(docs)
    namespace, rest = env["TRITONPIPELINE_WEBHOOK_SERVICE"].split("/")
    assert f"{rest.split(':')[0]}.{namespace}.svc" in cert["spec"]["dnsNames"]
    (vwc,) = by_kind(docs, "ValidatingWebhookConfiguration")
    assert (
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"ops/{cert['metadata']['name']}"
    )
    pod = deployment_of(docs)["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "webhook-tls"]
    assert mount["mountPath"] == env["TRITONPIPELINE_WEBHOOK_CERT_DIR"] and mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == "webhook-tls"]
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    given = helm.template(
        "rel",
        "ops",
        set_values=[
            "webhook.certManager.enabled=true",
            "webhook.certManager.issuerRef.name=corp-ca",
            "webhook.certManager.issuerRef.kind=ClusterIssuer",
        ],
    )
    assert not by_kind(given, "Issuer")
    (cert,) = by_kind(given, "Certificate")
    assert cert["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


# --- the real apiserver -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def servicemonitor_crd(admin: Kube) -> str | None:
    """The upstream prometheus-operator ServiceMonitor CRD (from its Go module), installed; or None
    with the reason in `servicemonitor_crd_problem`."""
    try:
        path = ensure_tool("servicemonitor-crd")
    except (ToolUnavailable, ToolError) as err:
        _SM_PROBLEM.append(str(err))
        return None
    return install_crd_file(admin, path)


_SM_PROBLEM: list[str] = []


@pytest.fixture(scope="session")
def prometheusrule_crd(admin: Kube) -> str | None:
    """The upstream prometheus-operator PrometheusRule CRD (from its Go module), installed; or None with
    the reason in `_PR_PROBLEM`."""
    try:
        path = ensure_tool("prometheusrule-crd")
    except (ToolUnavailable, ToolError) as err:
        _PR_PROBLEM.append(str(err))
        return None
    return install_crd_file(admin, path)


_PR_PROBLEM: list[str] = []


@pytest.mark.helm
@pytest.mark.apiserver
@pytest.mark.parametrize("scenario", ["default", *SCENARIOS])
def test_every_rendered_object_passes_server_side_dry_run(
    helm, admin, servicemonitor_crd, prometheusrule_crd, scenario
):
    """Each object through the real apiserver's validation and admission (dryRun=All,
    fieldValidation=Strict: an unknown or misspelt field is an error, not silently dropped)."""
    values = [SCENARIOS[scenario]] if scenario != "default" else []
    release_ns = unique("dry")
    docs = helm.template("rel", release_ns, values)
    for ns in {release_ns, *(d["metadata"].get("namespace") for d in docs)} - {None}:
        ensure_namespace(admin, ns)
    crd = yaml.safe_load(CRD_FILE.read_text())
    for peering_crd in yaml.safe_load_all(KOPF_CRD_FILE.read_text()):  # helm installs them from crds/
        admin.apply(peering_crd)
        wait_established(admin, peering_crd["metadata"]["name"])
    checked, skipped = [], []
    for obj in [crd, *docs]:
        if (obj["kind"], None) in (
            ("ServiceMonitor", servicemonitor_crd),
            ("PrometheusRule", prometheusrule_crd),
        ):
            skipped.append(f"{obj['kind']}/{obj['metadata']['name']}")
            continue
        result = dry_run_apply(admin, obj)
        assert result["kind"] == obj["kind"] and result["metadata"]["name"] == obj["metadata"]["name"]
        assert get_object(admin, obj) is None or obj["kind"] in ("CustomResourceDefinition",)  # not stored
        checked.append(f"{obj['kind']}/{obj['metadata']['name']}")
    assert len(checked) == len(docs) + 1 - len(skipped)
    if skipped:
        why = "; ".join([*_SM_PROBLEM, *_PR_PROBLEM])
        pytest.skip(f"validated {len(checked)} objects; {', '.join(skipped)} not validated: {why}")


@pytest.mark.helm
@pytest.mark.apiserver
@pytest.mark.parametrize(
    ("set_values", "field"),
    [
        (["resources.requests.cpu=lots"], "quantities must match the regular expression"),
        (["operator.port=70000"], "at '/operator/port': maximum"),
    ],
)
def test_bad_values_are_refused_by_schema_or_apiserver(helm, admin, set_values, field):
    try:
        docs = helm.template("rel", "dry-bad", set_values=set_values)
    except ToolError as err:
        assert field in str(err)
        return
    ensure_namespace(admin, "dry-bad")
    from tritonpipeline.kube.api_client import KubeError

    with pytest.raises(KubeError) as err:
        dry_run_apply(admin, deployment_of(docs))
    assert field in str(err.value)


# --- helm install + the operator under the chart's RBAC ------------------------------------------------


def check_refused_outside_grant(sa: Kube, watched: str, outside: str | None) -> dict[str, int]:
    """The chart's identity is refused what it was not granted (403 from the real authorizer)."""
    clusterrole = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": unique("escalate")},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    calls = {
        "list secrets": ("GET", f"/api/v1/namespaces/{watched}/secrets", None),
        "read a secret": ("GET", f"/api/v1/namespaces/{watched}/secrets/anything", None),
        "read the admin key": ("GET", f"/api/v1/namespaces/{watched}/secrets/vision-admin-key", None),
        "delete a secret": ("DELETE", f"/api/v1/namespaces/{watched}/secrets/anything", None),
        "create a ClusterRole": ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", clusterrole),
        "delete a Deployment": ("DELETE", f"/apis/apps/v1/namespaces/{watched}/deployments/vision", None),
        "delete a TritonPipeline": (
            "DELETE",
            f"/apis/{API}/namespaces/{watched}/tritonpipelines/vision",
            None,
        ),
        # pods are listed and watched (their status), never read from inside: no logs, no exec
        "read a pod's log": ("GET", f"/api/v1/namespaces/{watched}/pods/vision-0/log", None),
        "delete a pod": ("DELETE", f"/api/v1/namespaces/{watched}/pods/vision-0", None),
    }
    if outside:
        calls["read pipelines outside the watched namespaces"] = (
            "GET", f"/apis/{API}/namespaces/{outside}/tritonpipelines", None,
        )  # fmt: skip
        calls["list pipelines cluster-wide"] = ("GET", f"/apis/{API}/tritonpipelines", None)
    statuses = {what: http_status(sa, *call) for what, call in calls.items()}
    assert statuses == {what: 403 for what in calls}, statuses
    # and granted what it needs
    assert http_status(sa, "GET", f"/apis/{API}/namespaces/{watched}/tritonpipelines") == 200
    return statuses


def exercise_operator(admin: Kube, op: ChartOperator, ns: str) -> None:
    """Create, reconcile, scale out with an HPA and back (the operator deletes the HPA), restore a
    deleted Service: every verb of the chart's rules is used. Pipelines are applied once the operator
    registered its webhooks: the access review records on each what its author may reach, and a
    pipeline stored before is refused until someone allowed touches it."""
    configuration = op.container_env["TRITONPIPELINE_WEBHOOK_CONFIGURATION"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        wait_for(
            f"the operator's {kind}",
            lambda k=kind: (admin.get(WEBHOOK_API, k, None, configuration) or {}).get("webhooks"),  # type: ignore[misc]
            60,
        )
    doc = pipeline_doc("vision", ns)
    admin.apply(doc)

    def reconciled(generation: int) -> dict[str, Any] | None:
        cr = admin.get(API, "TritonPipeline", ns, "vision") or {}
        st = cr.get("status") or {}
        return cr if st.get("observedGeneration") == generation and condition(cr, "SpecValid") else None

    cr = wait_for("the pipeline to be reconciled under the chart's RBAC", lambda: reconciled(1), 60)
    assert condition(cr, "SpecValid")["reason"] == "Valid"
    assert condition(cr, "ModelsConfigured")["reason"] == "RepositoryGenerated"
    assert cr["status"]["endpoint"] == f"vision.{ns}.svc:8001"
    assert [r["name"] for r in cr["status"]["graph"]["routers"]] == ["vision__extract__FEATS_A__router"]
    assert admin.list("v1", "ConfigMap", ns, f"{SELECTOR}=vision")
    dep = admin.get("apps/v1", "Deployment", ns, "vision")
    init = dep["spec"]["template"]["spec"]["initContainers"][0]
    # the chart's default: the minimal assembler image, not the operator's
    assert init["image"] == op.container_env["TRITONPIPELINE_ASSEMBLER_IMAGE"] == DEFAULT_ASSEMBLER_IMAGE
    assert admin.get("v1", "Service", ns, "vision") is not None
    secret = admin.get("v1", "Secret", ns, "vision-admin-key")  # created under create-only RBAC
    assert secret is not None and secret["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
    wait_for(
        "a Created event posted by the operator",
        lambda: [
            e
            for e in admin.list("v1", "Event", ns, "")
            if e["involvedObject"].get("name") == "vision" and e["reason"] == "Created"
        ],
    )
    # the chart's default NetworkPolicy (security.defaultNetworkPolicy): inference from the namespace's
    # pods, metrics from them, Prometheus's namespace and the operator
    policy = admin.get("networking.k8s.io/v1", "NetworkPolicy", ns, "vision")
    assert policy is not None and [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == [8000, 8002]
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 3}
    doc["spec"]["networkPolicy"] = {"inference": []}  # nobody may reach inference
    admin.apply(doc)
    wait_for("generation 2", lambda: reconciled(2), 60)
    assert admin.get("autoscaling/v2", "HorizontalPodAutoscaler", ns, "vision") is not None
    policy = admin.get("networking.k8s.io/v1", "NetworkPolicy", ns, "vision")
    assert policy is not None and [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == [8002]
    del doc["spec"]["autoscaling"], doc["spec"]["networkPolicy"]
    admin.apply(doc)
    wait_for("generation 3", lambda: reconciled(3), 60)
    assert admin.get("autoscaling/v2", "HorizontalPodAutoscaler", ns, "vision") is None
    policy = admin.get("networking.k8s.io/v1", "NetworkPolicy", ns, "vision")  # the default again
    assert policy is not None and [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == [8000, 8002]
    admin.delete("v1", "Service", ns, "vision")
    wait_for("the deleted Service to be restored", lambda: admin.get("v1", "Service", ns, "vision"), 60)
    assert op.healthz() == 200
    assert op.readyz() == 200
    assert op.proc is not None and op.proc.poll() is None


def check_webhook_under_chart_rbac(admin: Kube, op: ChartOperator, ns: str, outside: str, name: str) -> None:
    """The operator fills the configuration helm created (patch of that one name is all it may do), and
    the apiserver then refuses a cyclic pipeline in a watched namespace with its field path; the
    webhook leaves unwatched namespaces alone."""
    from tritonpipeline.kube.api_client import KubeError

    vwc = wait_for(
        "the webhook registered",
        lambda: (admin.get(WEBHOOK_API, "ValidatingWebhookConfiguration", None, name) or {}).get("webhooks"),
        60,
    )
    watched = [op.args[i + 1] for i, arg in enumerate(op.args) if arg == "-n"]
    assert ns in watched and vwc[0]["namespaceSelector"]["matchExpressions"][0]["values"] == sorted(watched)
    doc = pipeline_doc("cyclic", ns, "diamond")
    doc["spec"]["pipelines"][0]["steps"][1]["inputs"]["FEATS_IN_B"] = "merge.JOINED"

    def refused() -> str:
        try:
            admin.apply(doc)
        except KubeError as exc:
            return str(exc)
        admin.delete(API, "TritonPipeline", ns, "cyclic")
        return ""

    message = wait_for("the apiserver to call the webhook", refused, 30, interval=0.5)
    assert "denied the request" in message and "spec.pipelines[0].steps[1].inputs: " in message
    outside_doc = {**doc, "metadata": {"name": "cyclic", "namespace": outside}}
    admin.apply(outside_doc)  # not watched: not this operator's to check


def assert_never_refused(op: ChartOperator) -> None:
    text = op.text()
    refused = [
        line
        for line in text.splitlines()
        if re.search(r"forbidden|\b403\b|Not enough permissions", line, re.I)
    ]
    assert not refused, "the operator was refused something under the chart's RBAC:\n" + "\n".join(
        refused[:10]
    )


@pytest.fixture
def operator_log(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    log = tmp_path / "operator.log"
    yield log
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and log.exists():
        print(f"\n===== operator log =====\n{log.read_text(errors='replace')[-8000:]}")


@pytest.mark.helm
@pytest.mark.apiserver
def test_namespaced_install_operator_runs_with_exactly_the_chart_rbac(
    cluster_helm, admin, control_plane, tmp_path, operator_log
):
    release, release_ns = unique("tp"), unique("ops")
    watched, other = unique("team"), unique("team")
    outside = unique("outside")
    for ns in (watched, other, outside):
        ensure_namespace(admin, ns)
    # on an IPv6 pod network (the cluster-wide test runs the IPv4 default): the operator's endpoints
    # and its webhook answer on [::1], and the Triton pods it renders listen on IPv6
    values = ["rbac.clusterWide=false", f"watchNamespaces={{{watched},{other}}}", "operator.ipFamily=IPv6"]
    notes = cluster_helm.install(release, release_ns, set_values=values)
    assert f"It watches the namespaces {watched}, {other}." in notes
    assert "kubectl apply --server-side --force-conflicts -f charts/triton-pipeline/crds/" in notes
    assert "failurePolicy Fail: while the operator is down or unreachable, EVERY TritonPipeline" in notes
    wait_established(admin, CRD_NAME)
    docs = cluster_helm.template(release, release_ns, set_values=values)
    for obj in docs:  # everything helm rendered is in the apiserver now
        assert get_object(admin, obj) is not None, f"{obj['kind']}/{obj['metadata']['name']}"
    sa_name = by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]
    token = service_account_token(admin, release_ns, sa_name)
    kubeconfig = token_kubeconfig(control_plane, token, tmp_path / "sa.kubeconfig")
    sa = kube_for(kubeconfig)
    whoami = sa.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{release_ns}:{sa_name}"
    op = ChartOperator(deployment_of(docs), kubeconfig, operator_log)
    assert op.args[-4:] == ["-n", watched, "-n", other]
    assert op.loopback == "[::1]" and op.container_env["TRITONPIPELINE_IP_FAMILY"] == "IPv6"
    with op:
        exercise_operator(admin, op, watched)
        pod = admin.get("apps/v1", "Deployment", watched, "vision")["spec"]["template"]["spec"]
        ipv6 = {"--http-address=ipv6:::", "--metrics-address=ipv6:::", "--grpc-address=[::]"}
        assert ipv6 <= set(pod["containers"][0]["args"])
        (vwc,) = by_kind(docs, "ValidatingWebhookConfiguration")
        check_webhook_under_chart_rbac(admin, op, watched, outside, vwc["metadata"]["name"])
        check_refused_outside_grant(sa, watched, outside)
        # a pipeline outside the grant is not touched (and the operator does not even try)
        admin.apply(pipeline_doc("vision", outside))
        admin.apply(pipeline_doc("vision2", other))
        wait_for(
            "the pipeline in the second watched namespace",
            lambda: (admin.get(API, "TritonPipeline", other, "vision2") or {}).get("status"),
            60,
        )
        assert not (admin.get(API, "TritonPipeline", outside, "vision") or {}).get("status")
        assert admin.get("apps/v1", "Deployment", outside, "vision") is None
    assert_never_refused(op)
    cluster_helm.uninstall(release, release_ns)
    for obj in docs:
        assert get_object(admin, obj) is None, f"{obj['kind']}/{obj['metadata']['name']} left behind"


@pytest.mark.helm
@pytest.mark.apiserver
def test_cluster_wide_install_on_a_fresh_cluster_and_uninstall_keeps_the_crd(
    helm_binary, control_plane, tmp_path, operator_log
):
    """A fresh control plane, so the CRD is installed by helm from the chart's crds/ (not by another test)
    and only this test's pipelines exist for the cluster-wide operator."""
    from harness.controlplane import ControlPlane

    with ControlPlane(tmp_path / "cp", control_plane.binaries) as cp:
        admin = Kube(cp.api_client(), "test-admin")
        helm = Helm(helm_binary, tmp_path / "helm-home", cp.kubeconfig)
        assert admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, CRD_NAME) is None
        values = [SCENARIOS["cluster-wide"]]
        strict = ["webhook.failurePolicy=Fail"]
        notes = helm.install("tp", "triton-system", values, strict)
        assert "It watches all namespaces." in notes
        assert "while the operator is down or unreachable, EVERY TritonPipeline create" in notes
        crd = admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, CRD_NAME)
        assert crd is not None  # from the chart's crds/ directory
        assert crd["spec"]["names"]["shortNames"] == ["tp"]
        wait_established(admin, CRD_NAME)
        docs = helm.template("tp", "triton-system", values, strict)
        token = service_account_token(admin, "triton-system", "tp-triton-pipeline")
        kubeconfig = token_kubeconfig(cp, token, tmp_path / "sa.kubeconfig")
        sa = kube_for(kubeconfig)
        ns = "ml"
        ensure_namespace(admin, ns)
        op = ChartOperator(deployment_of(docs), kubeconfig, operator_log)
        assert "-n" not in op.args
        with op:
            exercise_operator(admin, op, ns)
            check_refused_outside_grant(sa, ns, None)
            # cluster-wide: a namespace created after start-up is served too
            ensure_namespace(admin, "late")
            admin.apply(pipeline_doc("late", "late", "diamond"))
            wait_for(
                "a pipeline in a namespace created later",
                lambda: admin.get("apps/v1", "Deployment", "late", "late"),
                60,
            )
        assert_never_refused(op)
        # failurePolicy Fail, as NOTES.txt says: with the operator down every create is refused...
        from tritonpipeline.kube.api_client import KubeError

        with pytest.raises(KubeError, match="failed calling webhook"):
            admin.apply(pipeline_doc("while-down", ns))
        status = helm.status("tp", "triton-system")
        assert status["info"]["status"] == "deployed"
        helm.uninstall("tp", "triton-system")
        admin.apply(pipeline_doc("while-down", ns))  # ...until the configuration is gone with the release
        # helm never deletes CRDs from crds/: the CRD and every pipeline stay
        assert admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, CRD_NAME) is not None
        assert admin.get(API, "TritonPipeline", ns, "vision") is not None
        for obj in docs:
            assert get_object(admin, obj) is None, f"{obj['kind']}/{obj['metadata']['name']} left behind"
        # the identity lost its grant with the release (401 once the apiserver notices the deleted
        # ServiceAccount, 403 before that: its bindings are gone either way)
        assert http_status(sa, "GET", f"/apis/{API}/namespaces/{ns}/tritonpipelines") in (401, 403)
