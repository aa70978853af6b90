"""Docs and files that cannot drift: everything tools/generate.py (`make generate`) writes is current,
every spec field carries a description (the CRD's, which `kubectl explain` serves, and the field
reference's row), the generator's field table shows what the schema says, and README's pictures are the
compiler's."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from helpers import ROOT
from tritonpipeline.render.crd import crd, passes_through


def _generator() -> ModuleType:
    """tools/generate.py (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("generate", ROOT / "tools" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generator()


def spec_schema() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def properties(schema: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        yield here, sub
        if passes_through(sub) or passes_through(sub.get("items", {})):
            continue  # a Kubernetes type's own fields
        if sub.get("type") == "array":
            yield from properties(sub.get("items", {}), here + "[]")
        else:
            yield from properties(sub, here)


def test_every_generated_file_is_current() -> None:
    stale = [str(p.relative_to(ROOT)) for p in generate.stale()]
    assert not stale, f"stale generated files (run `make generate`): {stale}"


def test_every_spec_field_has_a_description() -> None:
    fields = dict(properties(spec_schema()))
    assert len(fields) > 90  # the walk reached the nested fields
    missing = sorted(p for p, s in fields.items() if len(s.get("description", "").strip()) < 10)
    assert not missing, f"spec fields without Field(description=...) in spec.py: {missing}"


def test_the_table_has_a_row_per_field_with_its_description_and_bounds() -> None:
    rows = {line.split("`")[1]: line for line in generate.field_table(crd()).splitlines()[2:]}
    assert set(rows) == {p for p, _ in properties(spec_schema())}
    assert rows["spec.server.gpus"] == (
        "| `spec.server.gpus` | integer | `1`, 0..64 | GPUs per pod; `0` = CPU only (GPU instance groups "
        "become CPU ones). |"
    )
    assert "| **required**, 1..256 items |" in rows["spec.models"]
    assert "| at most 16 items |" in rows["spec.models[].instances"]
    assert "| `50`, > 0, <= 1000000000000000 |" in rows["spec.autoscaling.target"]
    assert "`GPU` \\| `CPU` \\| `AUTO` \\| `MODEL`" in rows["spec.models[].instances[].kind"]
    # a description's pointer to a docs page becomes a link on the reference page
    assert "(see [concepts/security.md](../concepts/security.md))" in rows["spec.networkPolicy"]


def test_a_hand_edited_reference_or_picture_is_stale() -> None:
    def edited(path: Path) -> str | None:
        text = generate.read(path)
        if text is not None and path in (generate.FIELDS_PAGE, generate.README):
            return text.replace("GPUs per pod;", "GPUs per pod (edited);").replace("head_b", "head_x")
        return text

    assert generate.stale() == []
    assert generate.stale(edited) == [generate.FIELDS_PAGE, generate.README]


def test_readme_pictures_are_the_compilers_graph() -> None:
    import pictures

    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.compiler.visualize import to_mermaid
    from tritonpipeline.spec import load_file

    readme = (ROOT / "README.md").read_text()
    (tp,) = load_file(str(ROOT / "examples" / "fanout.yaml"))
    drawn = to_mermaid(compile_pipeline(tp).plan).rstrip()
    assert f"<!-- picture: graph examples/fanout.yaml -->\n```mermaid\n{drawn}\n```" in readme
    assert "router vision__extract__FEATS_A__router" in drawn  # the fan-out's router is in the picture
    # a stale picture after its marker is replaced, and the text around it kept
    assert pictures.expand("a\n<!-- picture: graph examples/fanout.yaml -->\n```mermaid\nold\n```\nb\n") == (
        f"a\n<!-- picture: graph examples/fanout.yaml -->\n```mermaid\n{drawn}\n```\nb\n"
    )
