"""What we ship, on the oldest Kubernetes release the chart says it supports (Chart.yaml `kubeVersion`)
and on the newest release.

The rest of the suite runs on one apiserver release (e2e/controlplane/kube-apiserver/go.mod), and
kubeconform checks against that release's schema. Another release differs in ways neither sees: a field
added after an older release is refused there by server-side apply ("field not declared in schema"), a
field behind a feature gate that is off there is dropped without a word, a CEL rule may not compile in its
environment, a newer release may have removed an API. So here every object we render goes to a real
kube-apiserver of each of those releases (e2e/controlplane/kube-apiserver-{floor,newest}/go.mod, built by
e2e/build-controlplane.sh, on the same etcd):

- the chart (default values and each ci/ values file), templated for that release;
- every pipeline render the manifest lint checks (the examples, their variants, the published
  repositories through `tritonpipeline import`), each object applied and read back whole;
- the examples' TritonPipelines themselves, and a spec the CRD's CEL rules refuse;
- the operator, reconciling examples there.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.controlplane_binaries import RELEASES, kubernetes_version, release_version
from harness.gotools import ToolError, ToolUnavailable, ensure_tool
from harness.helm import CHART, CI_VALUES, Helm
from harness.kubeapi import APPLY_PATCH, install_generated_crd, path_for, wait_established
from harness.manifest_lint import NAMESPACE, THIRD_PARTY_CRDS, pipeline_renders
from harness.operator_process import LocalOperator
from harness.paths import ROOT
from harness.wait import wait_for
from helpers import condition, contained, example
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.settings import API_VERSION, KIND

pytestmark = [pytest.mark.apiserver, pytest.mark.releases]

CHART_NAMESPACE = "ops"


@pytest.fixture(scope="module")
def release(release_plane: Any) -> Kube:
    """An admin client on the release's apiserver, with our CRD and the third-party CRDs of the kinds
    we render established."""
    kube = Kube(release_plane.api_client(), "test-admin")
    install_generated_crd(kube)
    for tool in THIRD_PARTY_CRDS:
        try:
            path = ensure_tool(tool)
        except (ToolUnavailable, ToolError) as err:
            pytest.skip(f"{tool} unavailable: {err}")
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                kube.apply(doc)
    for ns in (NAMESPACE, CHART_NAMESPACE):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return kube


class Resources:
    """Server-side apply of any kind we render (harness.kubeapi.path_for), optionally as a dry run."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        query = [("fieldManager", "test"), ("force", "true"), *([("dryRun", "All")] if dry_run else [])]
        url = path_for(obj)
        return self.kube.request("PATCH", url, query=query, body=obj, content_type=APPLY_PATCH, retries=0)


def _set(value: Any) -> Any:
    """`value` without the fields set to their zero value, which the apiserver leaves out as unset
    (`value: ""` of an env var, `readOnly: false`): a gated field dropped is never one of those."""
    if isinstance(value, dict):
        return {k: _set(v) for k, v in value.items() if v not in ("", 0, False, None, [], {})}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


# what the DefaultTolerationSeconds admission plugin adds to a Pod that tolerates neither (the chart's
# `helm test` pods; a Deployment's template is not a Pod and gets none)
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _without_defaults(obj: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """`live` without the tolerations the API server adds to a Pod by default that `obj` did not send."""
    if obj["kind"] != "Pod":
        return live
    sent = {t.get("key") for t in obj["spec"].get("tolerations", [])}
    spec = live.get("spec", {})
    added = [
        t
        for t in spec.get("tolerations", [])
        if t.get("key") in DEFAULT_TOLERATIONS and t.get("key") not in sent
    ]
    return {
        **live,
        "spec": {**spec, "tolerations": [t for t in spec.get("tolerations", []) if t not in added]},
    }


def stored_whole(resources: Resources, obj: dict[str, Any], *, dry_run: bool = False) -> list[str]:
    """Apply `obj`; what the apiserver refused or did not keep of it (empty: stored as sent)."""
    what = f"{obj['kind']} {obj['metadata']['name']}"
    try:
        live = resources.apply(obj, dry_run=dry_run)
    except (KubeError, KeyError) as err:
        return [f"{what}: refused: {err}"]
    return [f"{what}: not kept as sent: {d}" for d in contained(_set(obj), _without_defaults(obj, live))]


def _minor(version: str) -> int:
    return int(version.removeprefix("v").split(".")[1])


def test_the_releases_are_the_chart_s_floor_and_the_newest_and_the_docs_say_so() -> None:
    """The floor is the release Chart.yaml names as its oldest; the newest is not older than the one
    the rest of the suite runs on; the install page names all three."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    match = re.fullmatch(r">=\s*v?1\.(\d+)\.0(-0)?", chart["kubeVersion"])
    assert match, f"Chart.yaml kubeVersion {chart['kubeVersion']!r}: expected a floor, >=1.N.0-0"
    assert _minor(release_version("floor")) == int(match.group(1))
    assert _minor(release_version("newest")) >= _minor(kubernetes_version())
    install = (ROOT / "docs" / "reference" / "install.md").read_text()
    assert f"**Kubernetes 1.{match.group(1)} or newer**" in install
    for version in (kubernetes_version(), *map(release_version, RELEASES)):
        assert f"kube-apiserver {version.removeprefix('v')}" in install, version


def test_the_apiserver_is_the_release_it_was_built_from(release_plane: Any) -> None:
    reported = Kube(release_plane.api_client(), "test-admin").request("GET", "/version")
    assert reported["gitVersion"] == release_plane.version in map(release_version, RELEASES)
    assert reported["minor"] == str(_minor(release_plane.version))


@pytest.mark.helm
def test_the_chart_installs(release_plane: Any, release: Kube, helm_binary: Path, tmp_path: Path) -> None:
    """Every chart render, templated for the release: its CRDs established, every other object accepted
    (dry run: the webhook configuration must not reach the other tests) and kept whole."""
    helm = Helm(helm_binary, tmp_path / "helm-home")
    resources = Resources(release)
    problems = []
    for values in [None, *CI_VALUES]:
        args = ["template", "rel", str(CHART), "--namespace", CHART_NAMESPACE, "--include-crds"]
        args += ["--kube-version", release_plane.version, *(["-f", str(values)] if values else [])]
        source = values.name if values else "default values"
        docs = [d for d in yaml.safe_load_all(helm.run(*args).stdout) if d]
        assert docs, source
        for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
            release.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # team-a, ...
        for doc in [d for d in docs if d["kind"] == "CustomResourceDefinition"]:
            problems += [f"{source}: {p}" for p in stored_whole(resources, doc)]
            wait_established(release, doc["metadata"]["name"])
        for doc in [d for d in docs if d["kind"] != "CustomResourceDefinition"]:
            problems += [f"{source}: {p}" for p in stored_whole(resources, doc, dry_run=True)]
    assert problems == [], "\n".join(problems)


@pytest.mark.cli
def test_every_pipeline_render_is_stored_whole(release: Kube, tmp_path: Path) -> None:
    """Each object the operator applies for the examples, their variants and the imported published
    repositories: accepted by the release's apiserver and read back with every field it was sent."""
    resources = Resources(release)
    renders = pipeline_renders(tmp_path)
    assert len(renders) > 10
    problems = [f"{r.source}: {p}" for r in renders for o in r.objects for p in stored_whole(resources, o)]
    assert problems == [], "\n".join(problems)


def test_the_crd_validates_pipelines(release: Kube) -> None:
    """The examples are stored as sent; a spec the CRD's CEL rules refuse is refused there too."""
    resources = Resources(release)
    for source in ("fanout", "diamond", "streaming"):
        doc = example(source)
        doc["metadata"] = {"name": f"crd-{source}", "namespace": NAMESPACE}
        assert stored_whole(resources, doc) == []
    bad = example("fanout")
    bad["metadata"] = {"name": "crd-bad", "namespace": NAMESPACE}
    bad["spec"]["autoscaling"] = {"minReplicas": 3, "maxReplicas": 2}
    with pytest.raises(KubeError) as err:
        resources.apply(bad)
    assert err.value.status == 422
    assert "spec.autoscaling" in str(err.value) and "minReplicas" in str(err.value)


@pytest.fixture
def release_operator(release_plane: Any, release: Kube, tmp_path: Path) -> Iterator[tuple[Kube, str]]:
    ns = f"op-{int(time.time() * 1000) % 10**8}"
    release.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    op = LocalOperator(release_plane.kubeconfig, ns, tmp_path / "operator.log").start()
    try:
        yield release, ns
    finally:
        op.stop()
        print(f"\n===== operator log =====\n{op.text()[-6000:]}")


@pytest.mark.cli
def test_the_operator_reconciles_the_examples(release_operator: tuple[Kube, str]) -> None:
    """The operator on the release: each example's children applied, its status written."""
    kube, ns = release_operator
    for source in ("fanout", "streaming"):
        doc = example(source)
        doc["metadata"] = {"name": source, "namespace": ns}
        doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
        kube.apply(doc)
    for source in ("fanout", "streaming"):

        def reconciled(name: str = source) -> dict[str, Any] | None:
            cr = kube.get(API_VERSION, KIND, ns, name) or {}
            done = (cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"]
            return cr if done and condition(cr, "ModelsConfigured") else None

        cr = wait_for(f"{source} to be reconciled", reconciled, 60)
        assert condition(cr, "SpecValid")["status"] == "True"
        assert condition(cr, "UpToDate")["status"] == "True", condition(cr, "UpToDate")
        assert kube.get("apps/v1", "Deployment", ns, source) is not None
        assert kube.get("v1", "Service", ns, source) is not None
