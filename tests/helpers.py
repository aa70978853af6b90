"""Helpers shared by the test modules: repository paths, example specs, status conditions."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient
import yaml

from harness.paths import CLI, ROOT

__all__ = [
    "CLI",
    "DOCS",
    "EXAMPLES",
    "MODELS",
    "ROOT",
    "ROUTERS",
    "built_kubectl",
    "compile_to_serve",
    "condition",
    "conditional_by_size",
    "conditional_on_input",
    "curl_answers_as_shown",
    "docs_page",
    "established",
    "example",
    "native_router_or_skip",
    "nesting_depth",
    "on_ports",
    "served",
    "tree_with_stand_in_backends",
    "with_router",
]

EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs"
MODELS = ROOT / "model_repository"


def example(name: str, uri: str = str(MODELS)) -> dict[str, Any]:
    """A fresh, mutable copy of examples/<name>.yaml whose model repository is `uri` (by default the
    local model_repository/, as an absolute path)."""
    doc = copy.deepcopy(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    doc["spec"]["modelRepository"]["uri"] = uri
    return doc


def conditional_on_input(
    name: str, data_type: str, small: dict[str, Any], large: dict[str, Any]
) -> dict[str, Any]:
    """examples/conditional.yaml's branches chosen by a pipeline input `name` of `data_type` (no head, no
    classifier): the small branch where the comparison `small` holds (`{"in": [...]}`, say), the large
    one's steps where `large` does."""
    doc = example("conditional")
    pipeline = doc["spec"]["pipelines"][0]
    pipeline["inputs"].append({"name": name, "dataType": data_type, "dims": [1]})
    pipeline["steps"] = pipeline["steps"][1:]
    pipeline["steps"][0]["when"] = {"tensor": f"inputs.{name}", **small}
    for step in pipeline["steps"][1:]:
        step["when"] = {"tensor": f"inputs.{name}", **large}
    pipeline["outputs"] = pipeline["outputs"][:3]
    return doc


def conditional_by_size(small: list[str]) -> dict[str, Any]:
    """`conditional_on_input` on the string SIZE: the small branch through `in` (`small`), the large one
    where SIZE equals "l"."""
    return conditional_on_input("SIZE", "BYTES", {"in": small}, {"equals": "l"})


def nesting_depth(value: Any) -> int:
    """How many mappings and lists deep `value` is, walked without recursion."""
    most, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            most = max(most, level + 1)
            todo += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return most


def condition(cr: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    """The status condition of type `ctype` of a custom resource, or None."""
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def imported_example(name: str, uri: str = "pvc://models/triton") -> dict[str, Any]:
    """What `tritonpipeline import examples/published/NAME` writes, for a cluster reading `uri`."""
    from tritonpipeline.cli import read_model_repository
    from tritonpipeline.importer import import_repository

    root = EXAMPLES / "published" / name
    found = read_model_repository(root, str(root))
    result = import_repository(
        found.configs, found.no_config, name=name, uri=uri, version_files=found.version_files
    )
    assert result.document is not None, [str(f) for f in result.findings]
    return result.document


def tree_with_stand_in_backends(dest: Path) -> Path:
    """A tritonserver tree in NVIDIA's layout at `dest`, for TRITONPIPELINE_SERVER_HOME or its
    backends/ for --backend-directory: the wheel's binary and libraries (links), a copy of its backends
    (a backend's library may not resolve outside its backend's directory), and the stand-in backends of
    tests/backends beside them (vllm: a Python-based backend with the real one's interface)."""
    from tritonpipeline.local.tritonserver import server_home

    wheel = server_home()
    dest.mkdir(parents=True)
    for part in ("bin", "lib"):
        if (wheel / part).exists():
            (dest / part).symlink_to((wheel / part).resolve())
    shutil.copytree(wheel / "backends", dest / "backends")
    skip = shutil.ignore_patterns("__pycache__")
    for backend in (Path(__file__).parent / "backends").iterdir():
        shutil.copytree(backend, dest / "backends" / backend.name, ignore=skip)
    return dest


@contextlib.contextmanager
def served(*args: str) -> Iterator[tuple[int, int]]:
    """`tritonpipeline serve ARGS...` from the repository's root on free ports: (http, grpc) once it prints
    `serving;`; then stopped as Ctrl-C stops it, which must end it cleanly (exit 0)."""
    from tritonpipeline.local.tritonserver import free_ports

    http, grpc, metrics = free_ports(3)
    command = [str(CLI), "serve", *args, "--http-port", str(http), "--grpc-port", str(grpc)]
    command += ["--metrics-port", str(metrics)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving;"):
                break
        assert lines and lines[-1].startswith("serving;"), "".join(lines)
        yield http, grpc
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest


def on_ports(text: str, http: int, grpc: int) -> str:
    """A docs page's command or code, asking localhost:HTTP and localhost:GRPC instead of Triton's
    default ports (8000, 8001)."""
    return text.replace("localhost:8000", f"localhost:{http}").replace("localhost:8001", f"localhost:{grpc}")


def curl_answers_as_shown(command: str, shown: str, http: int, grpc: int) -> None:
    """A docs page's curl command (run by bash from the repository's root, on these ports) gets what the
    page's json block shows: the same model, version and outputs."""
    curl = subprocess.run(
        ["bash", "-euc", on_ports(command, http, grpc)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert curl.returncode == 0, curl.stderr
    answer, want = json.loads(curl.stdout), json.loads(shown)
    assert {k: answer[k] for k in want if k != "outputs"} == {k: v for k, v in want.items() if k != "outputs"}
    assert {o["name"]: o for o in answer["outputs"]} == {o["name"]: o for o in want["outputs"]}


def docs_page(name: str) -> str:
    """The Markdown of the docs site's page `docs/NAME` (for tests that hold a page to the code)."""
    return (DOCS / name).read_text()


def native_router_or_skip() -> bytes:
    """The native router built here (gcc, cached), as `serve` builds it; skips with the reason without a C
    compiler."""
    from tritonpipeline.local.native_router import NativeRouterUnavailable, build

    try:
        return build()
    except NativeRouterUnavailable as exc:
        pytest.skip(str(exc))


# what a router test runs its routers on: both backends (tests/conftest.py builds the native one)
ROUTERS = ("python", "native")


def speculative(doc: dict[str, Any], on: bool = True) -> dict[str, Any]:
    """The doc with every pipeline's `speculative` set to `on` (in place, and returned)."""
    for pipeline in doc["spec"]["pipelines"]:
        pipeline["speculative"] = on
    return doc


def with_router(doc: dict[str, Any], router: str) -> dict[str, Any]:
    """The pipeline doc with spec.server.router set: the shared and per-test tritonserver fixtures serve its
    routers on that backend."""
    out = copy.deepcopy(doc)
    out["spec"].setdefault("server", {})["router"] = router
    return out


def compile_to_serve(doc: dict[str, Any], cpu_only: bool = True) -> Any:
    """The doc compiled for a local tritonserver: its routers on the native router (built here) when its
    spec.server.router says `native`, else on the Python router."""
    from tritonpipeline.compiler import compile_pipeline
    from tritonpipeline.spec import parse_pipeline

    tp = parse_pipeline(doc)
    library = native_router_or_skip() if tp.spec.server.router == "native" else None
    return compile_pipeline(tp, cpu_only=cpu_only, native_router=library)


def built_kubectl() -> str | None:
    """kubectl as e2e/build-node.sh builds it for kind (the apiserver's release), else on PATH; None when
    neither."""
    proc = subprocess.run(
        ["bash", str(ROOT / "e2e" / "build-node.sh"), "--print-dir"], capture_output=True, text=True
    )
    env_file = Path(proc.stdout.strip()) / "node.env"
    if proc.returncode == 0 and env_file.is_file():
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        kubectl = Path(env.get("BIN_DIR", "")) / "kubectl"
        if os.access(kubectl, os.X_OK):
            return str(kubectl)
    return shutil.which("kubectl")


def served_config(server: Any, model: str) -> dict[str, Any]:
    """A loaded model's config as Triton serves it (what it made of the config.pbtxt)."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        config: dict[str, Any] = client.get_model_config(model, headers=server.admin_headers())
    finally:
        client.close()
    return config


def completed(server: Any, model: str) -> dict[str, Any]:
    """What Triton made of a model's config as it loaded it: its interface and transaction policy."""
    config = served_config(server, model)
    keep = ("backend", "platform", "max_batch_size", "input", "output", "model_transaction_policy")
    return {key: config.get(key) for key in keep} | {"dynamic": "dynamic_batching" in config}


def contained(want: Any, live: Any, path: str = "") -> list[str]:
    """Where `want` differs from `live`, every field of `want` compared (the apiserver adds defaults)."""
    if isinstance(want, dict):
        if not isinstance(live, dict):
            return [f"{path}: {live!r} is not a mapping"]
        return [d for k, v in want.items() for d in contained(v, live.get(k), f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return [f"{path}: {live!r} != {want!r}"]
        return [
            d
            for i, (w, v) in enumerate(zip(want, live, strict=True))
            for d in contained(w, v, f"{path}[{i}]")
        ]
    return [] if want == live else [f"{path}: {live!r} != {want!r}"]


def established(port: int) -> int:
    """Established TCP connections whose local port is `port` (the server side), from /proc/net/tcp{,6}."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = [line.split() for line in Path(table).read_text().splitlines()[1:]]
        except FileNotFoundError:
            continue
        count += sum(1 for row in rows if row[1].endswith(f":{port:04X}") and row[3] == "01")
    return count


def cluster_doc(name: str, namespace: str, source: str = "fanout") -> dict[str, Any]:
    doc = example(source)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    return doc


def doc_of(
    name: str, models: list[dict[str, Any]], pipelines: list[dict[str, Any]], uri: str = "pvc://models/repo"
) -> dict[str, Any]:
    """A CPU-only TritonPipeline of `models` and `pipelines`, its models at `uri`."""
    return {
        "apiVersion": "serving.tritonpipeline.io/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": name},
        "spec": {
            "server": {"gpus": 0},
            "modelRepository": {"uri": uri},
            "models": models,
            "pipelines": pipelines,
        },
    }


def py_model(
    name: str,
    mbs: int,
    inputs: dict[str, list[int]],
    outputs: dict[str, tuple[list[int], list[int | str]]],
    *,
    decoupled: bool = False,
) -> dict[str, Any]:
    """A generic FP32 model. outputs: NAME -> (declared dims, run-time shape without the batch
    dimension of a batching model; "B" is the request's first dimension)."""
    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": mbs,
        "inputs": [{"name": n, "dataType": "FP32", "dims": d} for n, d in inputs.items()],
        "outputs": [{"name": n, "dataType": "FP32", "dims": d} for n, (d, _) in outputs.items()],
        "instances": [{"kind": "CPU", "count": 1}],
        "decoupled": decoupled,
        "parameters": {"shapes": json.dumps({n: shape for n, (_, shape) in outputs.items()})},
    }


def check_with_reference(url: str, doc: dict[str, Any], workdir: Path, seeds: range = range(3)) -> str:
    """e2e/infer.py --spec (the reference evaluation of `make e2e` and the pod-level scenarios) against
    the server at `url` (HTTP) serving `doc`, once a seed: every pipeline must pass. Its last output."""
    spec = workdir / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    infer = [sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", url, "--spec", str(spec)]
    out = ""
    for seed in seeds:
        proc = subprocess.run(
            [*infer, "--seed", str(seed)], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "PASS" in proc.stdout and "FAIL" not in proc.stdout, proc.stdout
        out = proc.stdout
    return out


def images_at_once(
    grpc_url: str, model: str, images: Sequence[Any], outputs: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Each numpy array of `images` as the FP32 input IMAGE of a request of its own, all sent at once (so
    the server may batch them, examples/conditional.yaml's way in), and per answer its `outputs` (None
    where the answer leaves one out)."""
    import tritonclient.grpc.aio as grpcaio

    async def run() -> list[dict[str, Any]]:
        client = grpcaio.InferenceServerClient(grpc_url)
        try:

            async def one(image: Any) -> dict[str, Any]:
                t = grpcaio.InferInput("IMAGE", list(image.shape), "FP32")
                t.set_data_from_numpy(image)
                r = await client.infer(model, [t])
                return {name: r.as_numpy(name) for name in outputs}

            return list(await asyncio.gather(*(one(image) for image in images)))
        finally:
            await client.close()

    return asyncio.run(run())
