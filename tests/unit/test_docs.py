"""The docs stay in sync with the code: every spec field has a row in the field reference and every row
names a field that exists; README keeps its first lines and its links land on pages; every pointer to a
docs page, anywhere in the repository, names a page that exists; every condition reason has its row."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

import yaml

from helpers import DOCS, ROOT, docs_page
from tritonpipeline.render.crd import passes_through

README = ROOT / "README.md"
CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


def field_paths(schema: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, str]]:
    """(path, type) of every property under `schema`, arrays as `name[]`; a Kubernetes type's own fields
    are not the spec's (`kubectl explain` describes them)."""
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        kind = sub.get("type", "any")
        if passes_through(sub) or passes_through(sub.get("items", {})):
            yield here, f"[]{sub['items'].get('type', 'any')}" if kind == "array" else kind
        elif kind == "array":
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


def reference_rows() -> dict[str, str]:
    rows = {}
    for line in docs_page("reference/fields.md").splitlines():
        m = re.match(r"^\| `(spec[^`]*)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_every_crd_field_is_in_the_field_reference():
    fields, rows = crd_fields(), reference_rows()
    missing = [f"| `{p}` | {t} |" for p, t in fields.items() if p not in rows]
    assert not missing, "docs/reference/fields.md lacks these rows (make generate):\n" + "\n".join(missing)
    gone = sorted(set(rows) - set(fields))
    assert not gone, f"the field reference lists fields the CRD does not have: {gone}"
    wrong = {p: (rows[p], t) for p, t in fields.items() if rows[p] != t}
    assert not wrong, f"the field reference's types differ from the CRD (page, crd): {wrong}"


def test_readme_keeps_its_first_lines_stays_short_and_documents_crd_upgrades():
    text = README.read_text()
    assert text.startswith("# triton-pipeline\n\n```sh\nmake demo")
    assert text.splitlines()[4].startswith("make test")
    assert len(text.splitlines()) <= 150
    assert "kubectl apply --server-side --force-conflicts -f charts/triton-pipeline/crds/" in text
    assert "kubectl apply --server-side --force-conflicts -f charts/triton-pipeline/crds/" in docs_page(
        "how-to/upgrade.md"
    )
    notes = (ROOT / "charts" / "triton-pipeline" / "templates" / "NOTES.txt").read_text()
    assert "kubectl apply --server-side --force-conflicts -f charts/triton-pipeline/crds/" in notes
    assert "leaves the CRD" in notes
    for command in ("kubectl get tp -A", "kubectl apply", "kubectl describe tp", "logs deployment/"):
        assert command in notes, command


def test_readme_says_what_a_first_make_test_costs() -> None:
    """Issue 55: beside `make test`, the time and disk a first run takes, and how the disk was measured."""
    head = "\n".join(README.read_text().splitlines()[:20])
    cost = re.search(
        r"first `make test` costs\*\*: about \*\*(\d+) minutes\*\*.*?\*\*(\d+) GB of disk\*\*", head, re.S
    )
    assert cost is not None, head
    assert "du -sh" in head and "~/.cache/tritonpipeline" in head and "`.venv`" in head


def written_reasons() -> set[str]:
    """Every string that can be the `reason` argument of st.condition(...) in the operator, or of a
    st.Condition(...), which becomes one."""
    reasons: set[str] = set()
    for path in sorted((ROOT / "operator" / "tritonpipeline").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            name_ = getattr(func, "attr", getattr(func, "id", ""))
            if isinstance(node, ast.Call) and name_ in ("condition", "Condition") and len(node.args) >= 3:
                reasons |= {
                    c.value
                    for c in ast.walk(node.args[2])
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return reasons


def test_every_condition_reason_is_documented():
    """Every reason the operator writes (anywhere in the package) has a row in docs/how-to/status.md."""
    reasons = written_reasons()
    assert {"Valid", "InvalidSpec", "AllReplicasReady"} <= reasons  # the parser found them
    section = docs_page("how-to/status.md")
    undocumented = sorted(r for r in reasons if f"`{r}`" not in section)
    assert not undocumented, f"condition reasons without a row in docs/how-to/status.md: {undocumented}"


# a pointer to a docs page in code, charts, tests and docs: `docs/concepts/security.md`
DOCS_POINTER = re.compile(r"\bdocs/((?:[a-z-]+/)*[a-z-]+\.md)")
POINTER_SOURCES = ("operator", "charts", "tests", "harness", "e2e", "bench", "tools", "examples", "crds")


def docs_pointers() -> Iterator[tuple[str, str]]:
    """(file, page) of every `docs/PAGE.md` written in the repository's text files and README."""
    files = [README, *(p for top in POINTER_SOURCES for p in (ROOT / top).rglob("*") if p.is_file())]
    for path in files:
        if path.suffix not in {".py", ".md", ".yaml", ".yml", ".tpl", ".txt", ".json", ".sh", ".c"}:
            continue
        for m in DOCS_POINTER.finditer(path.read_text(errors="replace")):
            yield str(path.relative_to(ROOT)), m[1]


def test_every_pointer_to_a_docs_page_names_a_page_that_exists():
    pointers = list(docs_pointers())
    assert len(pointers) > 20  # README's links and the code's pointers were found
    broken = sorted({f"{where}: docs/{page}" for where, page in pointers if not (DOCS / page).is_file()})
    assert not broken, f"pointers to docs pages that do not exist: {broken}"


def test_readme_links_land_on_docs_pages_and_their_headings():
    """README is not built by MkDocs, so its links are checked here: each `docs/PAGE.md#anchor` names a page
    and, with an anchor, one of its headings (slugged as MkDocs' toc does)."""
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", README.read_text())
    assert len(links) > 15
    for page, anchor in links:
        assert (ROOT / page).is_file(), page
        text = (ROOT / page).read_text()
        if anchor:
            slugs = {
                re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h.strip().lower()))
                for h in re.findall(r"^#+ (.+)$", text, re.M)
            }
            assert anchor in slugs, (page, anchor, sorted(slugs))
