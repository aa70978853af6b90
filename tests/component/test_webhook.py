"""The validating admission webhook (runtime/admission.py, its certificates, configuration and server)
on the real kube-apiserver, reached over loopback TLS with the operator's own CA. The pure tests are in
tests/unit/test_webhook.py."""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from bench.controlplane.workload import large_doc
from harness.operator_process import OperatorProcess
from harness.wait import wait_for
from helpers import CLI, built_kubectl, condition
from support.webhook import cluster_doc, cyclic, mutated
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.local.tritonserver import free_port
from tritonpipeline.render import ownership, webhook_configuration
from tritonpipeline.runtime import webhook_certificates, webhook_server
from tritonpipeline.settings import GROUP
from unit.test_spec_errors import CASES

API = "serving.tritonpipeline.io/v1alpha1"


VWC_API = "admissionregistration.k8s.io/v1"


DENIED = f'admission webhook "{webhook_configuration.WEBHOOK_NAME}" denied the request'


# the compiler's graph rules the issue names: each must be refused by the webhook, not only in status
DUPLICATE_CLASSES = {
    "duplicate-model-name",
    "duplicate-model-output-name",
    "duplicate-pipeline-input-name",
    "duplicate-pipeline-output-name",
}


GRAPH_CLASSES = {
    "cycle-two-steps",
    "cycle-self-loop",
    "dtype-mismatch",
    "unmapped-required-input",
    "rejoin-of-two-decoupled-steps",
    "rejoin-of-decoupled-and-plain-branch",
    "sequence-step-after-decoupled-step",
    "several-instances-before-a-sequence-step",
    "optional-pipeline-input-to-a-required-input",
    "unknown-step",
    "ensemble-max-batch-above-step",
}


# ------------------------------------------------------------------- the real kube-apiserver


def call(
    kube: Kube,
    method: str,
    path: str,
    body: Any = None,
    query: tuple[tuple[str, str], ...] = (),
    content_type: str = "application/json",
    as_user: str = "",
) -> Any:
    """One API call (no retries): (HTTP status, decoded body, the Warning headers' texts); made as user
    `as_user` where given (the admin impersonates them: the API server authorizes, and the webhook
    reviews, that user)."""
    api = kube.api
    headers = {"Accept": "application/json", "Content-Type": content_type}
    if as_user:
        headers["Impersonate-User"] = as_user
    params = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(*params, _request_timeout=60)
    data = resp.read()
    headers = resp.getheaders()
    raw = headers.getlist("Warning") if hasattr(headers, "getlist") else [headers.get("Warning", "")]
    warnings = [
        m.group(1).replace('\\"', '"') for h in raw for m in re.finditer(r'299 - "((?:[^"\\]|\\.)*)"', h)
    ]
    return resp.status, (json.loads(data) if data else {}), warnings


def collection(ns: str) -> str:
    return f"/apis/{API}/namespaces/{ns}/tritonpipelines"


def create(kube: Kube, ns: str, doc: dict[str, Any], dry_run: bool = False) -> Any:
    query = (("fieldValidation", "Strict"),) + ((("dryRun", "All"),) if dry_run else ())
    return call(kube, "POST", collection(ns), doc, query)


def start_webhook_operator(
    kubeconfig: Path,
    kube: Kube,
    namespace: str,
    log: Path,
    configuration: str,
    policy: str = "Fail",
    extra: dict[str, str] | None = None,
) -> OperatorProcess:
    """`tritonpipeline run -n NAMESPACE` serving the webhook on a free loopback port and registering it as
    ValidatingWebhookConfiguration `configuration` (only that namespace, failurePolicy `policy`);
    returned once the apiserver calls it (stopped if it never does)."""
    env = {
        **(extra or {}),
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "TRITONPIPELINE_WEBHOOK_LISTEN": f"127.0.0.1:{free_port()}",
        "TRITONPIPELINE_WEBHOOK_CONFIGURATION": configuration,
        "TRITONPIPELINE_WEBHOOK_FAILURE_POLICY": policy,
    }
    op = OperatorProcess([str(CLI), "run", "-n", namespace], env, log).start()
    try:
        wait_for(
            "the webhook registered",
            lambda: "admission webhook" in op.text() and "registered" in op.text(),
            60,
        )
        probe = cyclic("probe")
        wait_for(
            "the apiserver to call the webhook",
            lambda: DENIED in create(kube, namespace, probe, dry_run=True)[1].get("message", ""),
            30,
        )
    except BaseException:
        print(f"\n===== operator log =====\n{op.text()[-6000:]}")
        op.stop()
        raise
    return op


@pytest.fixture
def webhook_operator(
    control_plane: Any, kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorProcess]]:
    """start(policy) -> start_webhook_operator for NAMESPACE, its configuration tp-webhook-NAMESPACE.
    Teardown stops it and deletes the configuration."""
    started: list[OperatorProcess] = []
    name = f"tp-webhook-{namespace}"

    def start(policy: str = "Fail", extra: dict[str, str] | None = None) -> OperatorProcess:
        log = tmp_path / "operator.log"
        op = start_webhook_operator(control_plane.kubeconfig, kube, namespace, log, name, policy, extra)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
    kube.delete(VWC_API, "ValidatingWebhookConfiguration", None, name)
    kube.delete(VWC_API, "MutatingWebhookConfiguration", None, name)  # the access review's, if any
    rep = getattr(request.node, "rep_call", None)
    if started and rep is not None and rep.failed:
        print(f"\n===== operator log =====\n{started[-1].text()[-6000:]}")


@pytest.mark.apiserver
def test_every_bad_spec_class_is_refused_at_apply_with_its_field_path(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess]
) -> None:
    """Each invalid spec of tests/unit/test_spec_errors.py is refused when created on the real apiserver: by
    the
    CRD's schema and CEL where they can tell, and by the webhook otherwise, with the compiler's field path
    and reason. Without the webhook the CRD lets those through (they would only be reported in status)."""
    docs = {c.id: mutated(c, f"case-{i}") for i, c in enumerate(CASES)}
    crd_only = {cid: create(kube, namespace, doc, dry_run=True)[0] for cid, doc in docs.items()}
    passes_crd = {cid for cid, status in crd_only.items() if status < 300}
    assert passes_crd >= GRAPH_CLASSES, (
        "the CRD alone refuses a graph rule: the test no longer needs a webhook"
    )
    webhook_operator("Fail")
    refused_by_webhook = set()
    for case in CASES:
        status, body, _ = create(kube, namespace, docs[case.id])
        assert status >= 400, f"{case.id}: stored although invalid"
        if case.id in passes_crd:
            message = body.get("message", "")
            assert DENIED in message, f"{case.id}: {message}"
            assert f"{case.path}: " in message and case.reason in message, f"{case.id}: {message}"
            assert status == 422
            refused_by_webhook.add(case.id)
    assert refused_by_webhook >= GRAPH_CLASSES
    # the spec's lists are atomic (render/crd.py): duplicate names are our rules' to refuse, with the path
    assert refused_by_webhook >= DUPLICATE_CLASSES
    assert kube.list(API, "TritonPipeline", namespace, "") == []


@pytest.mark.apiserver
def test_dry_run_server_is_refused_and_nothing_is_stored(
    control_plane: Any,
    kube: Kube,
    namespace: str,
    webhook_operator: Callable[..., OperatorProcess],
    tmp_path: Path,
) -> None:
    """`kubectl apply --dry-run=server` (and the API's dryRun=All under it) runs the webhook too."""
    webhook_operator("Fail")
    status, body, _ = create(kube, namespace, cyclic(), dry_run=True)
    assert status == 422 and DENIED in body["message"]
    assert "spec.pipelines[0].steps[1].inputs: " in body["message"]
    kubectl = built_kubectl()
    if kubectl is None:
        pytest.skip("no kubectl (make e2e builds it): the dryRun=All query above was checked")
    path = tmp_path / "cyclic.yaml"
    path.write_text(yaml.safe_dump(cyclic(namespace=namespace)))
    proc = subprocess.run(
        [kubectl, f"--kubeconfig={control_plane.kubeconfig}", "apply", "--dry-run=server", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stdout
    assert DENIED in proc.stderr and "spec.pipelines[0].steps[1].inputs: " in proc.stderr
    assert kube.get(API, "TritonPipeline", namespace, "cyclic") is None


@pytest.mark.apiserver
def test_valid_create_and_update_pass_with_their_warnings(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess]
) -> None:
    webhook_operator("Fail")
    doc = cluster_doc("streaming", "stream")
    status, stored, warnings = create(kube, namespace, doc)
    assert status == 201 and warnings == [], stored
    stored["spec"]["routing"] = {"sessionAffinity": "None"}  # allowed, but sequences will break
    url = f"{collection(namespace)}/stream"
    status, updated, warnings = call(kube, "PUT", url, stored)
    assert status == 200, updated
    assert updated["spec"]["routing"]["sessionAffinity"] == "None"
    assert len(warnings) == 1 and warnings[0].startswith("spec.routing.sessionAffinity: sequence model(s)")
    updated["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"VALUE": "dequantize.NOPE"}  # now invalid
    status, body, _ = call(kube, "PUT", url, updated)
    assert (
        status == 422
        and DENIED in body["message"]
        and "spec.pipelines[0].steps[1].inputs.VALUE" in body["message"]
    )


@pytest.mark.apiserver
def test_object_stored_before_the_webhook_keeps_status_reporting(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess]
) -> None:
    """Point 3: an invalid pipeline stored before the webhook existed is reported in status (SpecValid
    False, InvalidSpec) and still takes metadata updates; a change to its spec is refused."""
    status, _, _ = create(kube, namespace, cyclic())
    assert status == 201
    webhook_operator("Fail")
    cr = wait_for(
        "SpecValid=False",
        lambda: (
            (c := kube.get(API, "TritonPipeline", namespace, "cyclic"))
            and (condition(c, "SpecValid") or {}).get("reason") == "InvalidSpec"
            and c
        ),
        60,
    )
    assert "spec.pipelines[0].steps[1].inputs" in condition(cr, "SpecValid")["message"]
    url = f"{collection(namespace)}/cyclic"
    patch = {"metadata": {"labels": {"team": "a"}}}
    status, _, _ = merge_patch(kube, url, patch)
    assert status == 200
    status, body, _ = merge_patch(kube, url, {"spec": {"server": {"replicas": 3}}})
    assert status == 422 and DENIED in body["message"]


def merge_patch(kube: Kube, url: str, patch: dict[str, Any]) -> Any:
    return call(kube, "PATCH", url, patch, content_type="application/merge-patch+json")


def handshake(port: int, ca_bundle: bytes) -> bytes:
    """The certificate the server on loopback `port` presents, verified against `ca_bundle` for
    127.0.0.1 (what the apiserver checks); raises ssl.SSLError when it does not verify."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        return handshake_on(sock, ca_bundle)


def handshake_on(sock: socket.socket, ca_bundle: bytes) -> bytes:
    """handshake() over a connection already open."""
    context = ssl.create_default_context(cadata=ca_bundle.decode("ascii"))
    with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)


class Handshakes(threading.Thread):
    """Handshakes with the server on loopback `port`, back to back until `stop`: the certificates it
    presented, in order, and every failure (a refused connection, a certificate `ca_bundle` does not
    verify)."""

    def __init__(self, port: int, ca_bundle: bytes) -> None:
        super().__init__(daemon=True)
        self.port, self.ca_bundle = port, ca_bundle
        self.seen: list[bytes] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                cert = handshake(self.port, self.ca_bundle)
            except OSError as exc:  # ssl.SSLError too
                self.failures.append(repr(exc))
                continue
            if not self.seen or self.seen[-1] != cert:
                self.seen.append(cert)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def switched(watchers: list[Handshakes], cert: bytes, within: float, held: list[socket.socket]) -> None:
    """Wait until every watcher is presented `cert`, then stop them: each saw one switch and no failure.
    Each of `held`, connected before the switch, handshakes after it with the certificate it had: the
    switch closed neither the listener nor the connections it had accepted."""
    wait_for(
        "every replica to serve the renewed certificate",
        lambda: all(w.seen[-1:] == [cert] for w in watchers),
        within,
    )
    for w in watchers:
        w.stop()
    assert [w.failures for w in watchers] == [[] for _ in watchers]
    assert [len(w.seen) for w in watchers] == [2 for _ in watchers]
    assert [handshake_on(sock, w.ca_bundle) for sock, w in zip(held, watchers, strict=True)] == [
        w.seen[0] for w in watchers
    ]


@pytest.mark.apiserver
def test_replicas_share_one_certificate_and_follow_its_renewal(
    control_plane: Any, kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two operator processes started at once with one TRITONPIPELINE_WEBHOOK_SHARED_CERT: one writes
    the certificate, both serve it, and the registered caBundle verifies both at every moment, also
    while a renewal written by another replica rolls through them (each registers the new CA before it
    serves the certificate it signed), and no connection is refused meanwhile."""
    name, secret = f"tp-webhook-{namespace}", "webhook-cert"
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace}})
    ports = [free_port(), free_port()]
    ops = [
        OperatorProcess(
            [str(CLI), "run", "-n", namespace],
            {
                **os.environ,
                "KUBECONFIG": str(control_plane.kubeconfig),
                "TRITONPIPELINE_WEBHOOK_LISTEN": f"127.0.0.1:{port}",
                "TRITONPIPELINE_WEBHOOK_CONFIGURATION": name,
                "TRITONPIPELINE_WEBHOOK_SHARED_CERT": f"{namespace}/{secret}",
                "TRITONPIPELINE_WEBHOOK_CERT_SECONDS": "60",  # read the Secret every 10 s
            },
            tmp_path / f"operator-{i}.log",
        )
        for i, port in enumerate(ports)
    ]

    def trusted() -> bytes:
        vwc = kube.get(VWC_API, "ValidatingWebhookConfiguration", None, name)
        assert vwc is not None
        return base64.b64decode(vwc["webhooks"][0]["clientConfig"]["caBundle"])

    def stored() -> webhook_certificates.Certs:
        found = webhook_certificates.certs_of(kube.get("v1", "Secret", namespace, secret) or {})
        assert found is not None
        return found

    def serving() -> list[bytes]:
        """What each replica serves, each verified against the caBundle registered now."""
        bundle = trusted()
        return [handshake(port, bundle) for port in ports]

    watchers: list[Handshakes] = []
    try:
        for op in ops:
            op.start()
        wait_for("both registered", lambda: all("registered" in op.text() for op in ops), 60)
        wrote = [op.text().count("new self-signed certificate") for op in ops]
        assert sorted(wrote) == [0, 1], wrote  # one wrote it, the other read it
        first = stored()
        assert trusted() == first.ca_bundle
        assert serving() == [first.cert, first.cert]
        # another replica renews: a new certificate for the same names, the previous CA kept
        renewed = webhook_certificates.new_certs(
            first, ["127.0.0.1"], 3600, datetime.datetime.now(datetime.timezone.utc)
        )
        secret_doc = kube.get("v1", "Secret", namespace, secret)
        assert secret_doc is not None
        watchers += [Handshakes(port, renewed.ca_bundle) for port in ports]  # the bundle trusts both CAs
        for w in watchers:
            w.start()
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for port in ports]
        kube.request(
            "PUT",
            f"/api/v1/namespaces/{namespace}/secrets/{secret}",
            body={**secret_doc, "data": webhook_certificates.secret_data(renewed)},
        )
        # every handshake meanwhile verifies and none is refused: the certificate is swapped in place
        switched(watchers, renewed.cert, 30, held)  # a Secret check (10 s), with margin
        assert serving() == [renewed.cert, renewed.cert]
        assert trusted() == renewed.ca_bundle
    finally:
        for w in watchers:
            w.stop()
        for op in ops:
            op.stop()
        kube.delete(VWC_API, "ValidatingWebhookConfiguration", None, name)
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for op in ops:
                print(f"\n===== {op.log.name} =====\n{op.text()[-4000:]}")


def _mount(cert_dir: Path, certs: webhook_certificates.Certs, key: bytes | None = None) -> None:
    """Write tls.crt and tls.key as the kubelet updates a mounted Secret: a new directory, then one
    rename of the `..data` link the files point through."""
    stamp = f"..{time.monotonic_ns()}"
    (cert_dir / stamp).mkdir()
    (cert_dir / stamp / "tls.crt").write_bytes(certs.cert)
    (cert_dir / stamp / "tls.key").write_bytes(certs.key if key is None else key)
    (cert_dir / "..data_tmp").symlink_to(stamp)
    os.replace(cert_dir / "..data_tmp", cert_dir / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (cert_dir / name).is_symlink():
            (cert_dir / name).symlink_to(f"..data/{name}")


@pytest.mark.apiserver
def test_certificate_files_are_served_as_they_are_renewed_without_refusing_a_connection(
    control_plane: Any, kube: Kube, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """TRITONPIPELINE_WEBHOOK_CERT_DIR (cert-manager's Secret, mounted): a renewal is served within a file
    check, every handshake meanwhile verifies and none is refused; a certificate with the key of another
    is logged and not served."""
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    now = datetime.datetime.now(datetime.timezone.utc)
    first = webhook_certificates.new_certs(None, ["127.0.0.1"], 3600, now)
    _mount(cert_dir, first)
    port = free_port()
    op = OperatorProcess(
        [str(CLI), "run", "-n", namespace],
        {
            **os.environ,
            "KUBECONFIG": str(control_plane.kubeconfig),
            "TRITONPIPELINE_WEBHOOK_LISTEN": f"127.0.0.1:{port}",
            "TRITONPIPELINE_WEBHOOK_CONFIGURATION": f"tp-webhook-{namespace}",
            "TRITONPIPELINE_WEBHOOK_CERT_DIR": str(cert_dir),
        },
        tmp_path / "operator.log",
    )
    watchers: list[Handshakes] = []
    try:
        op.start()
        wait_for("the webhook registered", lambda: "registered" in op.text(), 60)
        assert handshake(port, first.ca_bundle) == first.cert
        # a certificate with the key of another: not loaded, the first one still served
        other = webhook_certificates.new_certs(first, ["127.0.0.1"], 3600, now)
        _mount(cert_dir, other, key=first.key)
        wait_for(
            "the pair refused",
            lambda: "does not load" in op.text(),
            3 * webhook_configuration.FILE_CHECK_SECONDS,
        )
        assert handshake(port, first.ca_bundle) == first.cert
        # the renewal, signed by a CA the bundle names beside the first
        renewed = webhook_certificates.new_certs(first, ["127.0.0.1"], 3600, now)
        watchers.append(Handshakes(port, renewed.ca_bundle))
        watchers[0].start()
        held = [socket.create_connection(("127.0.0.1", port), timeout=5)]
        _mount(cert_dir, renewed)
        switched(watchers, renewed.cert, 3 * webhook_configuration.FILE_CHECK_SECONDS, held)
        assert op.text().count("new connections get the renewed certificate") == 1
    finally:
        for w in watchers:
            w.stop()
        op.stop()
        kube.delete(VWC_API, "ValidatingWebhookConfiguration", None, f"tp-webhook-{namespace}")
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"\n===== operator log =====\n{op.text()[-6000:]}")


@pytest.mark.apiserver
def test_self_signed_certificate_is_renewed_before_it_expires(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess]
) -> None:
    """A 30 s certificate: after 20 s a new CA is registered and the server switches to its certificate,
    so past the first one's expiry the API server still reaches the webhook over verified TLS."""
    started = time.monotonic()
    op = webhook_operator("Fail", {"TRITONPIPELINE_WEBHOOK_CERT_SECONDS": "30"})
    name = f"tp-webhook-{namespace}"

    def trusted() -> bytes:
        vwc = kube.get(VWC_API, "ValidatingWebhookConfiguration", None, name)
        assert vwc is not None
        return base64.b64decode(vwc["webhooks"][0]["clientConfig"]["caBundle"])

    first = trusted()
    assert first.count(b"BEGIN CERTIFICATE") == 1
    # the first line is the start's certificate; the second, the renewal's
    wait_for("the certificate renewed", lambda: op.text().count("new self-signed certificate") >= 2, 40)
    wait_for("only the new CA trusted", lambda: first not in trusted() and trusted().count(b"BEGIN") == 1, 30)
    time.sleep(max(0.0, started + 35 - time.monotonic()))  # past the first certificate's expiry
    status, body, _ = create(kube, namespace, cyclic(), dry_run=True)
    assert status == 422 and DENIED in body["message"], body


@pytest.mark.apiserver
@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_unreachable_webhook_follows_the_failure_policy(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess], policy: str
) -> None:
    """With the operator stopped (its configuration stays): Ignore lets the apply through (the operator
    reports problems in status when it is back); Fail refuses every create until it is back."""
    op = webhook_operator(policy)
    op.stop()
    time.sleep(0.5)
    status, body, _ = create(kube, namespace, cyclic())
    if policy == "Ignore":
        assert status == 201, body
    else:
        assert status >= 500 and "failed calling webhook" in body["message"], body
        assert kube.get(API, "TritonPipeline", namespace, "cyclic") is None


# every API group the operator uses but admissionregistration.k8s.io and keda.sh
OPERATOR_GROUPS = [
    "",
    "apps",
    "policy",
    "autoscaling",
    "networking.k8s.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "apiextensions.k8s.io",
    "authorization.k8s.io",
    "kopf.dev",
    GROUP,
]


def restricted_operator(
    cp: Any, kube: Kube, namespace: str, name: str, rules: list[dict[str, Any]], path: Path
) -> tuple[Path, list[dict[str, Any]]]:
    """An operator identity of restricted RBAC: ServiceAccount `operator` of `namespace`, bound to a
    ClusterRole `name` of `rules`; a kubeconfig at `path` with its token, and the objects made (the
    ServiceAccount first: it goes with the namespace)."""
    from harness.kubeapi import apply_object, service_account_token
    from harness.kubeconfig import token_kubeconfig

    rbac = "rbac.authorization.k8s.io/v1"
    subject = {"kind": "ServiceAccount", "name": "operator", "namespace": namespace}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "operator", "namespace": namespace},
        },
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules},
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "subjects": [subject],
            "roleRef": role_ref,
        },
    ]
    for obj in objects:
        apply_object(kube, obj)
    return token_kubeconfig(cp, service_account_token(kube, namespace, "operator"), path), objects


@pytest.mark.apiserver
def test_not_ready_until_the_webhook_is_registered(
    control_plane: Any, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """A replica that cannot register its webhook (its RBAC may read webhook configurations but not
    write them) stays out of its Service: /readyz answers 503 naming why for as long as registering
    fails, while /metrics is served and each failure is logged with its retry. (Ready once registered:
    every webhook_operator above waits for it.)"""
    from harness.kubeapi import path_for
    from harness.operator_process import LocalOperator

    name = f"tp-not-registered-{namespace}"
    rules = [
        {"apiGroups": OPERATOR_GROUPS, "resources": ["*"], "verbs": ["*"]},
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["*"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    config, objects = restricted_operator(control_plane, kube, namespace, name, rules, tmp_path / "kc")
    env = {
        "TRITONPIPELINE_WEBHOOK_LISTEN": f"127.0.0.1:{free_port()}",
        "TRITONPIPELINE_WEBHOOK_CONFIGURATION": name,
    }
    op = LocalOperator(config, namespace, tmp_path / "operator.log", env=env, endpoints=True).start()
    try:
        wait_for("/metrics served", lambda: op.get("/metrics")[0] == 200, 60)
        failed = f"cannot register the admission webhook (ValidatingWebhookConfiguration {name!r})"
        wait_for("two failed registrations", lambda: op.text().count(failed) >= 2, 60)
        for _ in range(5):
            status, reason = op.get("/readyz")
            assert status == 503 and webhook_server.NOT_REGISTERED in reason, (status, reason)
            time.sleep(0.5)
        assert op.alive()
        assert kube.get(VWC_API, "ValidatingWebhookConfiguration", None, name) is None
    except BaseException:
        print(f"\n===== operator log =====\n{op.text()[-6000:]}")
        raise
    finally:
        op.stop()
        for obj in objects[:0:-1]:  # the namespace's ServiceAccount goes with the namespace
            kube.request("DELETE", path_for(obj))


@pytest.mark.apiserver
def test_a_pipeline_whose_objects_are_anothers_is_refused_at_creation(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess]
) -> None:
    """The webhook knows the cluster: a CREATE is refused, naming the object and its holder, when an object
    of a name the pipeline would make exists under another owner (a team's Service `c`), or when another
    pipeline of the namespace makes the same object (`b` makes `b-headless`); an object annotated for the
    pipeline, and the children of a deleted pipeline of the same name, are no refusal."""
    webhook_operator("Fail")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "c", "namespace": namespace},
        "spec": {"selector": {"app": "user-app"}, "ports": [{"port": 80}]},
    }
    kube.create(service)
    status, body, _ = create(kube, namespace, cluster_doc("fanout", "c", namespace))
    assert status == 422, body
    message = body.get("message", "")
    assert DENIED in message and "metadata.name: Service 'c' exists and is not this pipeline's" in message
    assert f"{ownership.ADOPT_ANNOTATION}=c" in message
    # annotated for the pipeline by its owner: allowed (the operator takes it over)
    kube.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/services/c",
        body={"metadata": {"annotations": {ownership.ADOPT_ANNOTATION: "c"}}},
        content_type="application/merge-patch+json",
    )
    assert create(kube, namespace, cluster_doc("fanout", "c", namespace), dry_run=True)[0] == 201

    assert create(kube, namespace, cluster_doc("fanout", "b", namespace))[0] == 201
    status, body, _ = create(kube, namespace, cluster_doc("fanout", "b-headless", namespace))
    assert status == 422, body
    assert "pipeline 'b' (in this namespace) makes Service 'b-headless' too" in body.get("message", "")
    assert [p["metadata"]["name"] for p in kube.list(API, "TritonPipeline", namespace, "")] == ["b"]
    # b deleted (no garbage collector runs here: its children stay, controlled by the b that was): a new b
    # takes them over, so it is no refusal
    wait_for("b's Service", lambda: kube.get("v1", "Service", namespace, "b"))
    kube.delete(API, "TritonPipeline", namespace, "b")
    wait_for("b deleted", lambda: kube.get(API, "TritonPipeline", namespace, "b") is None)
    assert create(kube, namespace, cluster_doc("fanout", "b", namespace))[0] == 201


@pytest.mark.apiserver
def test_a_large_pipeline_is_reviewed_not_refused_for_its_size(
    kube: Kube, namespace: str, webhook_operator: Callable[..., OperatorProcess]
) -> None:
    """An UPDATE review carries the object and its old copy with their managedFields: for a pipeline of
    about 500 KB more than aiohttp's default 1 MiB body, which the webhook answered 413 (failurePolicy
    Fail: every write of the pipeline refused, kopf's own patches included)."""
    webhook_operator("Fail")
    doc = large_doc("big", namespace, pipelines=16, tensors=6)
    assert len(json.dumps(doc)) > 450_000
    status, stored, _ = create(kube, namespace, doc)
    assert status == 201, str(stored)[:500]
    stored["metadata"].setdefault("labels", {})["team"] = "a"  # an UPDATE: object and oldObject reviewed
    status, updated, _ = call(kube, "PUT", f"{collection(namespace)}/big", stored)
    assert status == 200, str(updated)[:500]
    assert updated["metadata"]["labels"]["team"] == "a"
