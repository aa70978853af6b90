"""What tests/unit/test_import.py and tests/component/test_import.py share."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import CLI

# --------------------------------------------------------------------------- configs


def cfg(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


def ensemble(name: str, mbs: int, inputs: str, outputs: str, steps: str) -> str:
    return cfg(
        f"""
        name: "{name}"
        platform: "ensemble"
        max_batch_size: {mbs}
        input [ {inputs} ]
        output [ {outputs} ]
        ensemble_scheduling {{ step [ {steps} ] }}
        """
    )


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{ model_name: "{model}" model_version: {version} {" ".join(maps)} }}'


def tensor(name: str, dtype: str, dims: str, extra: str = "") -> str:
    return f'{{ name: "{name}" data_type: TYPE_{dtype} dims: [ {dims} ] {extra} }}'


# one python model and an ensemble calling it: the smallest repository the spec accepts today
ECHO = cfg(
    """
    name: "echo"
    backend: "python"
    max_batch_size: 4
    input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
    """
)


ECHO_ENSEMBLE = ensemble(
    "echo_pipe",
    4,
    tensor("X", "FP32", "2"),
    tensor("Y", "FP32", "2"),
    step("echo", {"IN": "X"}, {"OUT": "Y"}),
)


# --------------------------------------------------------------------------- the command


def run_import(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "tritonpipeline.cli"]
    return subprocess.run(
        [*cmd, "import", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def write_repo(root: Path, configs: dict[str, str], files: dict[str, str] | None = None) -> Path:
    for model, text in configs.items():
        (root / model).mkdir(parents=True, exist_ok=True)
        (root / model / "config.pbtxt").write_text(text)
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def snapshot(root: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(root)): ("dir" if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))
    }


def write_echo_repo(tmp_path: Path) -> Path:
    """tmp_path/models: the echo model (with a setting import cannot carry) and an ensemble of it."""
    text = (
        ECHO
        + "instance_group [ { kind: KIND_CPU secondary_devices [ { kind: KIND_NVDLA device_id: 1 } ] } ]\n"
    )
    return write_repo(tmp_path / "models", {"echo": text, "echo_pipe": ECHO_ENSEMBLE})
