"""Which backend a pipeline's routers run on, and how the native router reaches a pod: the operator's choice
(spec, then its setting, then the Triton image), the repository it renders for a cluster (a slot where the
library goes, ConfigMaps holding text) and the init container filling the slot from its image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.plan_types import (
    NATIVE_ROUTER_BACKEND,
    NATIVE_ROUTER_LIBRARY,
    NATIVE_ROUTER_SLOT,
)
from tritonpipeline.compiler.router_choice import NATIVE_SINCE, choose_router
from tritonpipeline.errors import SpecError
from tritonpipeline.local.native_router import INSTALLED_ENV, NativeRouterUnavailable, fill_slots, installed
from tritonpipeline.render.packing import entries_of, pack, unpack
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

ROUTER = "vision__extract__FEATS_A__router"


def fanout(image: str | None = None, router: str | None = None) -> Any:
    doc = example("fanout")
    if image:
        doc["spec"]["server"]["image"] = image
    if router:
        doc["spec"]["server"]["router"] = router
    return parse_pipeline(doc)


@pytest.mark.parametrize(
    ("image", "backend", "words"),
    [
        ("nvcr.io/nvidia/tritonserver:26.08-py3", "native", "runs the native router (from 24.10)"),
        ("nvcr.io/nvidia/tritonserver:24.10-py3", "native", "Triton 24.10"),
        ("nvcr.io/nvidia/tritonserver:24.09-py3", "python", "older than 24.10"),
        (
            "registry.example.com/ml/tritonserver:24.08-trtllm-python-py3@sha256:" + "a" * 64,
            "python",
            "24.08",
        ),
        ("registry.example.com/ml/my-triton:latest", "python", "cannot be told from its tag"),
    ],
)
def test_auto_follows_the_triton_release_of_the_image(image: str, backend: str, words: str) -> None:
    choice = choose_router(fanout(image))
    assert (choice.backend, words in choice.reason) == (backend, True), choice.reason
    assert NATIVE_SINCE == (24, 10)


def test_the_spec_wins_over_the_operator_setting_which_wins_over_the_image() -> None:
    old = "nvcr.io/nvidia/tritonserver:23.05-py3"
    assert choose_router(fanout(old, router="native"), "python").backend == "native"
    assert "spec.server.router is native" in choose_router(fanout(old, router="native"), "python").reason
    assert choose_router(fanout(router="python"), "native").backend == "python"
    forced = choose_router(fanout(old), "native")
    assert forced.backend == "native" and "TRITONPIPELINE_ROUTER" in forced.reason
    assert choose_router(fanout(), "python").backend == "python"
    assert choose_router(fanout(old), "auto").backend == "python"


def test_the_operator_setting_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env().router == "auto"
    monkeypatch.setenv("TRITONPIPELINE_ROUTER", "native")
    assert Settings.from_env().router == "native"
    monkeypatch.setenv("TRITONPIPELINE_ROUTER", "fast")
    with pytest.raises(
        ValueError, match="TRITONPIPELINE_ROUTER='fast': expected one of auto, native, python"
    ):
        Settings.from_env()


def test_a_cluster_repository_holds_a_slot_where_the_library_goes_and_says_so_in_status() -> None:
    tp = fanout()
    artifacts = compile_pipeline(tp, router=choose_router(tp))
    config = artifacts.files[f"{ROUTER}/config.pbtxt"].decode()
    assert f'backend: "{NATIVE_ROUTER_BACKEND}"' in config
    assert set(p for p in artifacts.files if p.startswith(f"{ROUTER}/1/")) == {
        f"{ROUTER}/1/{NATIVE_ROUTER_SLOT}"
    }
    artifacts.files[f"{ROUTER}/1/{NATIVE_ROUTER_SLOT}"].decode()  # text: it travels in a ConfigMap's data
    graph = artifacts.graph_summary()
    assert graph["routerBackend"]["backend"] == "native" and "26.08" in graph["routerBackend"]["reason"]
    assert {r["backend"] for r in graph["routers"]} == {"native"}
    # the Python router: its code, no slot, and the reason too
    python = compile_pipeline(tp, router=choose_router(fanout(router="python")))
    assert (
        f"{ROUTER}/1/model.py" in python.files
        and 'backend: "python"' in python.files[f"{ROUTER}/config.pbtxt"].decode()
    )
    assert python.graph_summary()["routerBackend"]["backend"] == "python"


def test_the_init_container_puts_its_images_library_in_each_slot(tmp_path: Path) -> None:
    tp = fanout()
    files = compile_pipeline(tp, router=choose_router(tp)).files
    library = tmp_path / NATIVE_ROUTER_LIBRARY
    library.write_bytes(b"\x7fELF library bytes")
    filled = fill_slots(files, lambda: installed({INSTALLED_ENV: str(library)}))
    assert filled[f"{ROUTER}/1/{NATIVE_ROUTER_LIBRARY}"] == b"\x7fELF library bytes"
    assert not any(p.endswith(NATIVE_ROUTER_SLOT) for p in filled)
    # no slot, nothing read: the Python router's repository needs no library
    python = compile_pipeline(tp, router=choose_router(fanout(router="python"))).files
    assert fill_slots(python, lambda: pytest.fail("read the library")) == python


@pytest.mark.parametrize(
    ("environ", "why"), [({}, "is not set"), ({INSTALLED_ENV: "/nonexistent/lib.so"}, "No such file")]
)
def test_an_image_without_the_library_is_one_clear_error(environ: dict[str, str], why: str) -> None:
    with pytest.raises(NativeRouterUnavailable) as err:
        installed(environ)
    assert why in str(err.value) and "spec.server.router: python" in str(err.value)


def test_assemble_refuses_a_slot_it_cannot_fill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonpipeline.local.assemble import assemble

    tp = fanout()
    artifacts = compile_pipeline(tp, router=choose_router(tp))
    generated = tmp_path / "generated"
    generated.mkdir()
    configmaps = [
        {"data": p.data, "binaryData": p.binary_data}
        for p in pack(artifacts.files, artifacts.models, 900_000)
    ]
    for key, blob in entries_of(configmaps).items():  # as the projected volume of the ConfigMaps shows them
        (generated / key).write_bytes(blob)
    assert unpack({p.name: p.read_bytes() for p in generated.iterdir()}).files == artifacts.files
    assert not any(p.binary_data for p in pack(artifacts.files, artifacts.models, 900_000))  # text only
    models = Path(example("fanout")["spec"]["modelRepository"]["uri"])
    monkeypatch.delenv(INSTALLED_ENV, raising=False)
    with pytest.raises(SpecError, match=r"spec.server.router: .*carries no native router library"):
        assemble(generated, str(models), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    library = tmp_path / "lib" / NATIVE_ROUTER_LIBRARY
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF")
    monkeypatch.setenv(INSTALLED_ENV, str(library))
    assemble(generated, str(models), tmp_path / "out")
    assert (tmp_path / "out" / ROUTER / "1" / NATIVE_ROUTER_LIBRARY).read_bytes() == b"\x7fELF"
