"""README stays in sync with the CRD: every spec field has a row in the field reference, and every row
names a field that exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

import yaml

from helpers import ROOT

README = ROOT / "README.md"
CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


def field_paths(schema: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, str]]:
    """(path, type) of every property under `schema`, arrays as `name[]`."""
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        kind = sub.get("type", "any")
        if kind == "array":
            items = sub.get("items", {})
            yield here, f"[]{items.get('type', 'any')}"
            yield from field_paths(items, here + "[]")
        else:
            yield here, kind
            yield from field_paths(sub, here)


def crd_fields() -> dict[str, str]:
    crd = yaml.safe_load(CRD_FILE.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return dict(field_paths(spec))


def readme_rows() -> dict[str, str]:
    section = README.read_text().split("## TritonPipeline field reference", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `(spec[^`]*)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_every_crd_field_is_in_the_readme_reference():
    fields, rows = crd_fields(), readme_rows()
    missing = [f"| `{p}` | {t} |  | (describe) |" for p, t in fields.items() if p not in rows]
    assert not missing, "README field reference lacks these rows:\n" + "\n".join(missing)
    gone = sorted(set(rows) - set(fields))
    assert not gone, f"README field reference lists fields the CRD does not have: {gone}"
    wrong = {p: (rows[p], t) for p, t in fields.items() if rows[p] != t}
    assert not wrong, f"README types differ from the CRD (readme, crd): {wrong}"


def test_readme_keeps_its_first_lines_and_documents_crd_upgrades():
    text = README.read_text()
    assert text.startswith("# triton-pipeline\n\n```sh\nmake demo")
    assert "kubectl apply --server-side --force-conflicts -f charts/triton-pipeline/crds/" in text
    notes = (ROOT / "charts" / "triton-pipeline" / "templates" / "NOTES.txt").read_text()
    assert "kubectl apply --server-side --force-conflicts -f charts/triton-pipeline/crds/" in notes
    assert "leaves the CRD" in notes
    for command in ("kubectl get tp -A", "kubectl apply", "kubectl describe tp", "logs deployment/"):
        assert command in notes, command


def written_reasons() -> set[str]:
    """Every string that can be the `reason` argument of st.condition(...) in the operator."""
    reasons: set[str] = set()
    for path in sorted((ROOT / "operator" / "tritonpipeline").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            name_ = getattr(func, "attr", getattr(func, "id", ""))
            if isinstance(node, ast.Call) and name_ == "condition" and len(node.args) >= 3:
                reasons |= {
                    c.value
                    for c in ast.walk(node.args[2])
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return reasons


def test_every_condition_reason_is_documented():
    """Every reason the operator writes (anywhere in the package) has a row in 'Reading status'."""
    reasons = written_reasons()
    assert {"Valid", "InvalidSpec", "AllReplicasReady"} <= reasons  # the parser found them
    section = README.read_text().split("## Reading status", 1)[1].split("\n## ", 1)[0]
    undocumented = sorted(r for r in reasons if f"`{r}`" not in section)
    assert not undocumented, f"condition reasons without a row in README 'Reading status': {undocumented}"
