"""The validating admission webhook (runtime/admission.py, its certificates and configuration): what it
answers and registers, without a server. The tests on the real kube-apiserver are in
tests/component/test_webhook.py."""

from __future__ import annotations

import asyncio
import copy
import datetime
import ipaddress
import re
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from helpers import imported_example
from support.webhook import cluster_doc, cyclic, mutated
from tritonpipeline.cli import compile_file
from tritonpipeline.errors import SpecError
from tritonpipeline.render import webhook_configuration
from tritonpipeline.runtime import admission, compiling, webhook_certificates
from tritonpipeline.settings import Settings
from tritonpipeline.spec import newer_fields, parse_pipeline
from unit.test_spec_errors import CASES, Case

# ------------------------------------------------------------------------------------ pure


# the classes of a field the schema does not know: refused in a file (a typo), allowed at admission with a
# warning (the API server prunes what its CRD does not define, so there a newer CRD defines it:
# tests/component/test_crd_skew.py)
UNKNOWN_FIELD_CLASSES = {
    "unknown-top-level-field",
    "unknown-nested-field-lists-allowed",
    "unknown-field-in-step",
    "unknown-field-in-model-tensor",
}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_webhook_refuses_with_the_messages_validate_prints(case: Case, tmp_path: Path) -> None:
    """Every bad-spec class: the webhook's problems are `tritonpipeline validate`'s and the operator's
    reconcile's, path and message (all three through render/checks.py `validate`); but a field the
    schema does not know is a newer CRD's at admission and in the cluster: allowed, with a warning."""
    doc = mutated(case)
    if case.id in UNKNOWN_FIELD_CLASSES:
        with pytest.raises(SpecError) as info:
            parse_pipeline(doc)
        assert [p.path for p in info.value.problems] == [case.path]
        verdict = compiling.verdict(doc)
        named = newer_fields([case.path])  # spec.pipelines[*].steps[*].modle
        assert verdict.allowed and [w.path for w in verdict.warnings][:1] == [named], verdict
        assert compiling.compile_cr(doc, Settings())[3] == [case.path]  # the operator: SchemaCurrent
        return
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as info:
        compile_file(str(path))
    verdict = compiling.verdict(doc)
    assert not verdict.allowed
    assert verdict.problems == info.value.problems
    with pytest.raises(SpecError) as operator:  # the operator's reconcile refuses the same
        compiling.compile_cr(doc, Settings())
    assert operator.value.problems == info.value.problems
    assert any(p.path == case.path and case.reason in p.message for p in verdict.problems)
    assert verdict.message().splitlines() == [str(p) for p in info.value.problems]


def test_valid_spec_is_allowed_with_its_warnings() -> None:
    doc = cluster_doc("streaming")  # a sequence model on 2 replicas, session affinity Header
    assert compiling.verdict(doc).allowed and not compiling.verdict(doc).warnings
    doc["spec"]["routing"] = {"sessionAffinity": "None"}
    verdict = compiling.verdict(doc)
    assert verdict.allowed
    assert [w.path for w in verdict.warnings] == ["spec.routing.sessionAffinity"]
    assert "chunks of one sequence will reach different replicas" in verdict.warnings[0].message
    # the retired ingress-nginx is still allowed, with a warning that points to the migration
    doc["spec"]["routing"] = {"sessionAffinity": "Header", "provider": "ingress-nginx", "tlsSecretName": "t"}
    verdict = compiling.verdict(doc)
    assert verdict.allowed
    assert [w.path for w in verdict.warnings] == ["spec.routing.provider"]
    message = verdict.warnings[0].message
    assert "deprecated" in message and "docs/how-to/migrate-ingress-nginx.md" in message


@pytest.mark.parametrize("name", ["tensorrtllm", "asr", "tutorials"])
def test_what_import_writes_is_allowed(name: str) -> None:
    verdict = compiling.verdict(imported_example(name))
    assert verdict.allowed and not verdict.warnings, verdict.message()


def test_privilege_beyond_restricted_is_refused_unless_the_operator_grants_it() -> None:
    doc = cluster_doc("fanout")
    doc["spec"]["server"]["securityContext"] = {"privileged": True}
    refused = compiling.verdict(doc)
    assert not refused.allowed
    assert [p.path for p in refused.problems] == ["spec.server.securityContext.privileged"]
    assert compiling.verdict(doc, Settings(allow_privileged=True)).allowed


def test_only_creates_and_spec_changes_are_reviewed() -> None:
    """Point 3: an object stored before the webhook (invalid) still takes label, annotation and finalizer
    updates (kopf's own included); its status reports the problem. A spec change is reviewed."""
    bad = cyclic()
    labelled = copy.deepcopy(bad)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert admission.review("CREATE", bad, None)
    assert not admission.review("UPDATE", labelled, bad)
    changed = copy.deepcopy(bad)
    changed["spec"]["server"]["replicas"] = 3
    assert admission.review("UPDATE", changed, bad)
    deleting = copy.deepcopy(changed)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not admission.review("UPDATE", deleting, bad)
    assert not admission.review("DELETE", None, bad)


def test_admit_refuses_with_422_and_adds_warnings() -> None:
    with pytest.raises(kopf.AdmissionError) as info:
        asyncio.run(admission.admit("CREATE", cyclic(), None, [], None))
    assert info.value.code == 422
    assert str(info.value).startswith("spec.pipelines[0].steps[1].inputs: cycle in pipeline")
    warnings: list[str] = []
    doc = cluster_doc("streaming")
    doc["spec"]["routing"] = {"sessionAffinity": "None"}
    asyncio.run(admission.admit("UPDATE", doc, cluster_doc("streaming"), warnings, None))
    assert len(warnings) == 1 and warnings[0].startswith("spec.routing.sessionAffinity: ")


def test_an_internal_error_allows_with_a_warning() -> None:
    """A bug in the checks must not block every apply: the request passes, kubectl prints why it was not
    checked, and the operator still reports in status."""
    warnings: list[str] = []
    broken_settings: Any = object()  # no configmap_max_bytes: the cluster checks raise AttributeError
    asyncio.run(admission.admit("CREATE", cluster_doc("fanout"), None, warnings, broken_settings))
    assert warnings == ["not checked at admission (AttributeError); the operator reports in status"]


def test_configuration_scopes_the_webhook_to_the_watched_namespaces() -> None:
    ws = webhook_configuration.WebhookSettings(
        listen="127.0.0.1:9443", failure_policy="Fail", timeout_seconds=7
    )
    (hook,) = webhook_configuration.configuration(ws, ["b", "a"], b"PEM")["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}
    ]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/validate", "caBundle": "UEVN"}
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 7)
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    # cluster-wide: every namespace; through a Service; no caBundle (cert-manager's injector owns it)
    svc = webhook_configuration.WebhookSettings(listen="0.0.0.0:9443", service="ops/tp-webhook:443")
    (hook,) = webhook_configuration.configuration(svc, [], None)["webhooks"]
    assert "namespaceSelector" not in hook
    assert hook["clientConfig"] == {
        "service": {"namespace": "ops", "name": "tp-webhook", "port": 443, "path": "/validate"}
    }
    assert "tp-webhook.ops.svc" in svc.server_names()
    # the operator's own namespace is never matched, whatever the failure policy (its pods never wait on
    # their own webhook)
    (hook,) = webhook_configuration.configuration(svc, [], None, own_namespace="ops")["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ops"]}
    ]
    (hook,) = webhook_configuration.configuration(svc, ["a"], None, own_namespace="ops")["webhooks"]
    assert [e["operator"] for e in hook["namespaceSelector"]["matchExpressions"]] == ["In", "NotIn"]


def test_the_webhook_fails_closed_by_default() -> None:
    """Issue 54: with Ignore, a review the webhook could not answer stored the object unchecked."""
    assert webhook_configuration.WebhookSettings().failure_policy == "Fail"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TRITONPIPELINE_WEBHOOK_FAILURE_POLICY": "fail"}, "TRITONPIPELINE_WEBHOOK_FAILURE_POLICY='fail'"),
        ({"TRITONPIPELINE_WEBHOOK_TIMEOUT_SECONDS": "31"}, "TRITONPIPELINE_WEBHOOK_TIMEOUT_SECONDS='31'"),
        ({"TRITONPIPELINE_WEBHOOK_LISTEN": "9443"}, "TRITONPIPELINE_WEBHOOK_LISTEN='9443'"),
        (
            {"TRITONPIPELINE_WEBHOOK_LISTEN": ":9443", "TRITONPIPELINE_WEBHOOK_SERVICE": "ops/Web:443"},
            "TRITONPIPELINE_WEBHOOK_SERVICE='ops/Web:443'",
        ),
        (
            {"TRITONPIPELINE_WEBHOOK_LISTEN": ":9443", "TRITONPIPELINE_WEBHOOK_SERVICE": "ops/-web:443"},
            "TRITONPIPELINE_WEBHOOK_SERVICE='ops/-web:443'",
        ),
        (
            {"TRITONPIPELINE_WEBHOOK_LISTEN": ":9443", "TRITONPIPELINE_WEBHOOK_CONFIGURATION": "Tp_Hook"},
            "TRITONPIPELINE_WEBHOOK_CONFIGURATION='Tp_Hook'",
        ),
        (
            {"TRITONPIPELINE_WEBHOOK_LISTEN": ":9443", "TRITONPIPELINE_WEBHOOK_CERT_DIR": "/nonexistent"},
            "tls.crt and tls.key missing",
        ),
        (
            {"TRITONPIPELINE_WEBHOOK_LISTEN": ":9443", "TRITONPIPELINE_WEBHOOK_SHARED_CERT": "webhook-cert"},
            "TRITONPIPELINE_WEBHOOK_SHARED_CERT='webhook-cert': expected NAMESPACE/NAME",
        ),
    ],
)
def test_bad_webhook_setting_is_named(env: dict[str, str], named: str) -> None:
    with pytest.raises(webhook_configuration.WebhookConfigError, match=re.escape(named)):
        webhook_configuration.WebhookSettings.from_env(env)


def test_self_signed_certificate_serves_tls_for_its_names(tmp_path: Path) -> None:
    """The serving certificate verifies against the CA for the Service's DNS names and for an IP (what the
    apiserver checks), and not for another name."""
    from cryptography import x509
    from cryptography.x509 import verification

    ca_pem, cert_pem, _ = webhook_certificates.self_signed(["tp.ops.svc", "127.0.0.1"])
    store = verification.Store([x509.load_pem_x509_certificate(ca_pem)])
    leaf = x509.load_pem_x509_certificate(cert_pem)
    for name in (x509.DNSName("tp.ops.svc"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))):
        verifier = verification.PolicyBuilder().store(store).build_server_verifier(name)
        verifier.verify(leaf, [])
    other = verification.PolicyBuilder().store(store).build_server_verifier(x509.DNSName("evil.example"))
    with pytest.raises(verification.VerificationError):
        other.verify(leaf, [])


def _utc(seconds: float = 0) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


def _cas(bundle: bytes) -> list[bytes]:
    return [c.public_bytes(serialization.Encoding.PEM) for c in x509.load_pem_x509_certificates(bundle)]


def test_shared_certificate_is_renewed_after_two_thirds_of_its_life_or_for_other_names() -> None:
    """`due`: a fresh certificate serves on; past two thirds of its life, for other names, or unreadable,
    every replica that reads it agrees it must be replaced (and says why)."""
    certs = webhook_certificates.new_certs(None, ["wh", "wh.ops.svc"], 300, _utc())
    assert webhook_certificates.due(certs, ["wh.ops.svc", "wh"], _utc()) == ""
    assert webhook_certificates.due(certs, ["wh", "wh.ops.svc"], _utc(190)) == ""  # below 200 s
    assert "expires at" in webhook_certificates.due(certs, ["wh", "wh.ops.svc"], _utc(210))
    assert "reached as ['other']" in webhook_certificates.due(certs, ["other"], _utc())
    broken = webhook_certificates.Certs(certs.ca_bundle, b"not a certificate", certs.key)
    assert "cannot be read" in webhook_certificates.due(broken, ["wh", "wh.ops.svc"], _utc())


def test_renewal_keeps_the_previous_ca_trusted_until_it_expires() -> None:
    """A renewed bundle trusts the previous CA (a replica still serving the previous certificate is
    reached) and the new one, which signed the new certificate; expired CAs leave it."""
    first = webhook_certificates.new_certs(None, ["127.0.0.1"], 60, _utc())
    second = webhook_certificates.new_certs(first, ["127.0.0.1"], 600, _utc())
    (first_ca,) = _cas(first.ca_bundle)
    assert _cas(second.ca_bundle)[0] == first_ca and len(_cas(second.ca_bundle)) == 2
    leaf = x509.load_pem_x509_certificate(second.cert)
    assert leaf.issuer == x509.load_pem_x509_certificate(_cas(second.ca_bundle)[1]).subject
    assert leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(_cas(second.ca_bundle)[1])) is None
    assert webhook_certificates.pruned(second, _utc(30)) == second
    later = webhook_certificates.pruned(second, _utc(120))  # the first CA (60 s) has expired
    assert _cas(later.ca_bundle) == _cas(second.ca_bundle)[1:] and later.cert == second.cert
    third = webhook_certificates.new_certs(second, ["127.0.0.1"], 600, _utc(120))
    assert first_ca not in _cas(third.ca_bundle) and len(_cas(third.ca_bundle)) == 2


def test_shared_certificate_round_trips_through_a_secret() -> None:
    certs = webhook_certificates.new_certs(None, ["127.0.0.1"], 60, _utc())
    secret = {"metadata": {"name": "c"}, "data": webhook_certificates.secret_data(certs)}
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert webhook_certificates.certs_of(secret) == certs
    assert webhook_certificates.certs_of({"metadata": {"name": "c"}}) is None  # the chart's empty Secret
    assert webhook_certificates.certs_of({"data": {"ca.crt": "!!", "tls.crt": "", "tls.key": ""}}) is None
