"""`make lint-manifests`: what we ship, checked by the tools cluster admins run on what they deploy.

Rendered first, as a cluster would get it:

- every example (examples/*.yaml, and each published model repository under examples/published/ through
  `tritonpipeline import`) as the operator applies it, in namespace `ml` with its models on a PVC, the
  ready-to-apply cluster examples (examples/cluster/*.yaml) as they are, in `ml`, plus
  VARIANTS that switch on the objects the examples do not create (autoscaler, KEDA, NetworkPolicy, the
  routing providers);
- the chart with its default values and with each charts/triton-pipeline/ci/*-values.yaml.

Then checked by:

- kubeconform -strict, against schemas made from Kubernetes' own OpenAPI document (k8s.io/kubernetes at the
  control plane's version) and from the CRDs of every custom kind rendered (harness/kubeschema.py): a
  misspelt or misplaced field, a wrong type, an unknown kind fail;
- kube-score (its default checks);
- checkov (its Kubernetes checks; from PyPI, in a virtual environment of its own, cached);
- helm lint --strict, per values file.

Every finding must match an entry of EXCEPTIONS (tools/lint-exceptions.yaml), each with its reason; an
entry that matches nothing fails too, so the file cannot outlive what it excuses. Polaris and kube-linter
are not run: the Go module proxy here serves neither (docs/concepts/security.md).

    python -m harness.manifest_lint            # builds the tools on first use (cached), prints findings
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .gotools import ensure_tool
from .helm import CHART, CI_VALUES, Helm
from .kubeschema import write_crds, write_openapi_v2
from .paths import CLI, ROOT, cache_root

EXCEPTIONS = ROOT / "tools" / "lint-exceptions.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CLUSTER_EXAMPLES = sorted((ROOT / "examples" / "cluster").glob("*.yaml"))
PUBLISHED = sorted(p for p in (ROOT / "examples" / "published").iterdir() if p.is_dir())
NAMESPACE = "ml"
CLUSTER_URI = "pvc://models/triton"
# the objects the examples as written do not create: (pipeline name, example, spec fields set over it)
VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "fanout-hpa",  # with an autoscaler and a NetworkPolicy
        "fanout",
        {
            "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
            "networkPolicy": {"inference": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]},
        },
    ),
    ("diamond-keda", "diamond", {"autoscaling": {"minReplicas": 1, "maxReplicas": 3, "engine": "keda"}}),
    ("streaming-istio", "streaming", {"routing": {"sessionAffinity": "Header", "provider": "istio"}}),
    (
        "streaming-gateway",
        "streaming",
        {
            "routing": {
                "sessionAffinity": "Header",
                "provider": "gateway-api",
                "gateway": {"name": "public", "namespace": "gateways", "implementation": "envoy-gateway"},
            }
        },
    ),
    ("streaming-stream", "streaming", {"routing": {"sessionAffinity": "Stream"}}),
    (
        "streaming-ingress",  # the deprecated provider, still rendered
        "streaming",
        {
            "routing": {
                "sessionAffinity": "Header",
                "provider": "ingress-nginx",
                "host": "streaming.example.com",
                "ingressClassName": "nginx",
                "tlsSecretName": "streaming-tls",
            }
        },
    ),
)
# the CRDs of the custom kinds the renders hold (e2e/build-gotool.sh fetches the third-party ones)
THIRD_PARTY_CRDS = (
    "servicemonitor-crd",
    "prometheusrule-crd",
    "keda-crd",
    "istio-crds",
    "gateway-api-crds",
    "envoy-gateway-crds",
)
# ours, and kopf's peering CRDs the chart ships (crds/ holds the TritonPipeline CRD the chart copies)
OUR_CRDS = [*sorted((ROOT / "crds").glob("*.yaml")), CHART / "crds" / "kopfpeerings.kopf.dev.yaml"]
SCHEMA_LOCATION = "{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json"
KUBE_SCORE_FAILING = 5  # kube-score's grades: 1 critical, 5 warning, 7 almost OK, 10 OK
CHECKOV_VERSION = "3.3.30"  # latest on PyPI when pinned


@dataclass(frozen=True)
class Render:
    """One rendering: what it is (`example fanout`, `chart ci/namespaced-values.yaml`) and its objects."""

    source: str
    objects: tuple[dict[str, Any], ...]

    def write(self, path: Path) -> Path:
        """The objects as one multi-document YAML file, what each tool reads."""
        path.write_text(yaml.safe_dump_all(self.objects, sort_keys=False))
        return path


@dataclass(frozen=True)
class Finding:
    tool: str
    check: str
    obj: str  # Kind/name
    message: str
    source: str

    def __str__(self) -> str:
        return f"{self.tool} {self.check}: {self.obj} ({self.source}): {self.message}"


@dataclass
class Exception_:
    """One entry of EXCEPTIONS: findings of `tool` and `check` on objects matching `objects` (a regex on
    Kind/name) whose message matches `message` (a regex; any when absent) are accepted, for `reason`."""

    tool: str
    check: str
    reason: str
    objects: str = ".*"
    message: str = ".*"
    used: int = field(default=0, compare=False)

    def matches(self, f: Finding) -> bool:
        return (
            f.tool == self.tool
            and f.check == self.check
            and re.fullmatch(self.objects, f.obj) is not None
            and re.search(self.message, f.message) is not None
        )


class ExceptionsError(ValueError):
    """The exceptions file is not what it must be (every entry with its tool, check and reason)."""


def load_exceptions(path: Path = EXCEPTIONS) -> list[Exception_]:
    doc = yaml.safe_load(path.read_text()) or []
    if not isinstance(doc, list):
        raise ExceptionsError(f"{path}: expected a list of exceptions, got {type(doc).__name__}")
    found = []
    for i, entry in enumerate(doc):
        where = f"{path.name}[{i}]"
        if not isinstance(entry, dict):
            raise ExceptionsError(f"{where}: expected a mapping with tool, check and reason")
        unknown = set(entry) - {"tool", "check", "reason", "objects", "message"}
        if unknown:
            raise ExceptionsError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        for key in ("tool", "check", "reason"):
            if not str(entry.get(key, "")).strip():
                raise ExceptionsError(f"{where}.{key}: required (every exception says why it is one)")
        for key in ("objects", "message"):
            try:
                re.compile(str(entry.get(key, ".*")))
            except re.error as exc:
                raise ExceptionsError(f"{where}.{key}: not a regular expression ({exc})") from None
        text = {k: str(v) for k, v in entry.items()}
        found.append(
            Exception_(
                text["tool"],
                text["check"],
                text["reason"],
                text.get("objects", ".*"),
                text.get("message", ".*"),
            )
        )
    return found


def judge(findings: Iterable[Finding], exceptions: list[Exception_]) -> list[Finding]:
    """The findings no exception accepts (and counts each exception's use)."""
    left = []
    for f in findings:
        accepted = [e for e in exceptions if e.matches(f)]
        for e in accepted:
            e.used += 1
        if not accepted:
            left.append(f)
    return left


# --------------------------------------------------------------------------- rendering


def _cluster_doc(doc: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """A pipeline document as applied to a cluster: in NAMESPACE, its models on a PVC."""
    out = copy.deepcopy(doc)
    out["metadata"] = {**(out.get("metadata") or {}), "namespace": NAMESPACE}
    if name:
        out["metadata"]["name"] = name
    out["spec"]["modelRepository"]["uri"] = CLUSTER_URI
    return out


def render_pipeline(doc: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Every object the operator applies for one TritonPipeline document (`tritonpipeline manifests`)."""
    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.render.manifests import render_children
    from tritonpipeline.settings import Settings
    from tritonpipeline.spec import parse_pipeline

    tp = parse_pipeline(doc)
    children = render_children(tp, compile_pipeline(tp), Settings())
    objects = [*children.all(), *children.routing.provider_objects]
    if children.scaled_object:
        objects.append(children.scaled_object)
    return tuple(objects)


def _imported(repository: Path, work: Path) -> dict[str, Any]:
    """A published model repository as `tritonpipeline import` brings it in."""
    out = work / f"{repository.name}.yaml"
    proc = subprocess.run(
        [str(CLI), "import", str(repository), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tritonpipeline import {repository} failed:\n{proc.stderr}")
    doc: dict[str, Any] = yaml.safe_load(out.read_text())
    return doc


def pipeline_renders(work: Path) -> list[Render]:
    renders = []
    examples = {p.stem: yaml.safe_load(p.read_text()) for p in EXAMPLES}
    for stem, doc in examples.items():
        renders.append(Render(f"example {stem}", render_pipeline(_cluster_doc(doc))))
    for path in CLUSTER_EXAMPLES:  # applied as written (their uri is a claim's), in NAMESPACE
        doc = yaml.safe_load(path.read_text())
        doc["metadata"] = {**doc["metadata"], "namespace": NAMESPACE}
        renders.append(Render(f"cluster example {path.stem}", render_pipeline(doc)))
    for name, stem, spec in VARIANTS:
        doc = _cluster_doc(examples[stem], name=name)
        doc["spec"].update(copy.deepcopy(spec))
        renders.append(Render(f"example {stem} ({name})", render_pipeline(doc)))
    for repository in PUBLISHED:
        doc = _cluster_doc(_imported(repository, work))
        renders.append(Render(f"published {repository.name} (imported)", render_pipeline(doc)))
    return renders


def chart_renders(helm: Helm) -> list[Render]:
    """`helm template --include-crds` with the default values and with each CI values file."""
    renders = []
    for values in [None, *CI_VALUES]:
        args = ["template", "rel", str(CHART), "--namespace", "ops", "--include-crds"]
        out = helm.run(*args, *(["-f", str(values)] if values else [])).stdout
        source = f"chart {values.relative_to(CHART)}" if values else "chart (default values)"
        renders.append(Render(source, tuple(d for d in yaml.safe_load_all(out) if d)))
    return renders


# --------------------------------------------------------------------------- the tools


def schema_dir(cache: Path) -> Path:
    """kubeconform's schemas (SCHEMA_LOCATION under the returned directory), made once per input."""
    swagger = ensure_tool("kubernetes-openapi")
    crd_files = [ensure_tool(t) for t in THIRD_PARTY_CRDS] + OUR_CRDS
    digest = hashlib.sha256()
    for path in [swagger, *crd_files, Path(__file__).with_name("kubeschema.py")]:
        digest.update(path.read_bytes())
    out = cache / digest.hexdigest()[:16]
    if (out / ".complete").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix=".schemas.", dir=cache))
    write_openapi_v2(json.loads(swagger.read_text()), tmp)
    crds = [d for p in crd_files for d in yaml.safe_load_all(p.read_text()) if d]
    write_crds(crds, tmp)
    (tmp / ".complete").touch()
    tmp.rename(out)
    return out


def kubeconform(binary: Path, schemas: Path, renders: Sequence[Render], work: Path) -> list[Finding]:
    found = []
    for i, render in enumerate(renders):
        path = render.write(work / f"kubeconform-{i}.yaml")
        proc = subprocess.run(
            [str(binary), "-strict", "-output", "json", "-schema-location", f"{schemas}/{SCHEMA_LOCATION}",
             str(path)],
            capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"kubeconform failed ({proc.returncode}): {proc.stderr}")
        for resource in json.loads(proc.stdout or "{}").get("resources") or []:
            if resource.get("status") in ("statusInvalid", "statusError"):
                obj = f"{resource.get('kind')}/{resource.get('name')}"
                found.append(
                    Finding("kubeconform", resource["status"], obj, resource.get("msg", ""), render.source)
                )
    return found


def kube_score(binary: Path, renders: Sequence[Render], work: Path) -> list[Finding]:
    found = []
    for i, render in enumerate(renders):
        path = render.write(work / f"kube-score-{i}.yaml")
        proc = subprocess.run([str(binary), "score", "-o", "json", str(path)], capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"kube-score failed ({proc.returncode}): {proc.stderr}")
        for scored in json.loads(proc.stdout):
            obj = f"{scored['type_meta']['kind']}/{scored['object_meta'].get('name')}"
            for check in scored["checks"]:
                if check["skipped"] or check["grade"] > KUBE_SCORE_FAILING:
                    continue
                for comment in check.get("comments") or [{"summary": check["check"]["name"]}]:
                    where = comment.get("path") or ""
                    text = f"{where + ': ' if where else ''}{comment.get('summary', '')}"
                    found.append(Finding("kube-score", check["check"]["id"], obj, text, render.source))
    return found


def checkov_binary(log: Any = sys.stdout) -> Path:
    """checkov CHECKOV_VERSION in a virtual environment of its own (its dependencies are not ours),
    installed from PyPI on first use and cached by version (a half-made one is made again)."""
    venv = cache_root() / "checkov" / CHECKOV_VERSION / "venv"
    done = venv / ".installed"
    if done.exists():
        return venv / "bin" / "checkov"
    print(f">> installing checkov {CHECKOV_VERSION} from PyPI into {venv} (first time, about 30 s)", file=log)
    log.flush()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    proc = subprocess.run([*pip, f"checkov=={CHECKOV_VERSION}"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install checkov=={CHECKOV_VERSION} failed:\n{proc.stderr[-3000:]}")
    done.touch()
    return venv / "bin" / "checkov"


def _checkov_object(resource: str) -> str:
    """checkov names a resource `Kind.namespace.name[.labels...]`: Kind/name."""
    parts = resource.split(".")
    return f"{parts[0]}/{parts[2] if len(parts) > 2 else parts[-1]}"


def checkov(binary: Path, renders: Sequence[Render], work: Path) -> list[Finding]:
    """checkov's Kubernetes checks over every rendering at once (one file each; it reports per file)."""
    where = work / "checkov"
    where.mkdir()
    sources = {}
    for i, render in enumerate(renders):
        path = render.write(where / f"render-{i}.yaml")
        sources[f"/{path.name}"] = render.source
    proc = subprocess.run(
        [str(binary), "--framework", "kubernetes", "-d", str(where), "-o", "json", "--quiet", "--compact"],
        capture_output=True, text=True, cwd=where,
    )  # fmt: skip
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"checkov failed ({proc.returncode}): {proc.stderr[-3000:]}")
    reports = json.loads(proc.stdout or "[]")
    found = []
    for report in reports if isinstance(reports, list) else [reports]:
        for failed in (report.get("results") or {}).get("failed_checks") or []:
            source = sources.get(failed.get("file_path", ""), failed.get("file_path", ""))
            obj = _checkov_object(failed.get("resource", ""))
            found.append(Finding("checkov", failed["check_id"], obj, failed.get("check_name", ""), source))
    return found


def helm_lint(helm: Helm) -> list[Finding]:
    found = []
    for values in [None, *CI_VALUES]:
        proc = helm.run("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []), check=False)
        source = f"chart {values.relative_to(CHART)}" if values else "chart (default values)"
        for line in proc.stdout.splitlines():
            m = re.match(r"\[(ERROR|WARNING)\] (.*)", line.strip())  # what --strict fails on
            if m:
                found.append(Finding("helm-lint", m.group(1), "Chart/triton-pipeline", m.group(2), source))
        if proc.returncode != 0 and not found:
            found.append(Finding("helm-lint", "ERROR", "Chart/triton-pipeline", proc.stderr.strip(), source))
    return found


# --------------------------------------------------------------------------- the run


@dataclass
class Report:
    renders: list[Render]
    findings: list[Finding]
    unexcused: list[Finding]
    unused: list[Exception_]

    @property
    def ok(self) -> bool:
        return not self.unexcused and not self.unused


def run(work: Path, exceptions_path: Path = EXCEPTIONS, log: Any = sys.stdout) -> Report:
    exceptions = load_exceptions(exceptions_path)  # a broken file fails before minutes of building
    cache = cache_root() / "kubeconform-schemas"
    cache.mkdir(parents=True, exist_ok=True)
    tools = {t: ensure_tool(t, output=log) for t in ("kubeconform", "kube-score", "helm")}
    tools["checkov"] = checkov_binary(log)
    helm = Helm(tools["helm"], home=work / "helm")
    print(">> lint-manifests: rendering the examples, their variants and the chart", file=log, flush=True)
    renders = [*pipeline_renders(work), *chart_renders(helm)]
    schemas = schema_dir(cache)
    findings = [
        *kubeconform(tools["kubeconform"], schemas, renders, work),
        *kube_score(tools["kube-score"], renders, work),
        *checkov(tools["checkov"], renders, work),
        *helm_lint(helm),
    ]
    unexcused = judge(findings, exceptions)
    return Report(renders, findings, unexcused, [e for e in exceptions if not e.used])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.manifest_lint", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--exceptions", type=Path, default=EXCEPTIONS)
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="lint-manifests-") as tmp:
            report = run(Path(tmp), args.exceptions)
    except ExceptionsError as exc:
        print(f"lint-manifests: {exc}", file=sys.stderr)
        return 2
    objects = sum(len(r.objects) for r in report.renders)
    excused = len(report.findings) - len(report.unexcused)
    per_tool = Counter(f.tool for f in report.findings)
    tools = ("kubeconform", "kube-score", "checkov", "helm-lint")
    counts = ", ".join(f"{tool} {per_tool[tool]}" for tool in tools)
    print(
        f">> lint-manifests: {len(report.renders)} renderings, {objects} objects; {len(report.findings)} "
        f"findings ({counts}), {excused} excused by {args.exceptions.name}"
    )
    for f in report.unexcused:
        print(f"finding: {f}", file=sys.stderr)
    for e in report.unused:
        print(
            f"stale exception: {e.tool} {e.check} (objects {e.objects!r}, message {e.message!r}) matches "
            "no finding any more: remove it",
            file=sys.stderr,
        )
    if not report.ok:
        print(
            f"lint-manifests: {len(report.unexcused)} finding(s) not excused, {len(report.unused)} stale "
            f"exception(s); fix the manifests, or add an exception with its reason to {args.exceptions}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
