"""`tritonpipeline serve` as a user runs it: a subprocess, real tritonserver, Ctrl-C and SIGTERM."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import CLI, ROOT, tree_with_stand_in_backends
from tritonpipeline.local.tritonserver import free_ports

pytestmark = [pytest.mark.tritonserver, pytest.mark.cli]


def infer_once(port: int) -> None:
    """One request to the fan-out example served on 127.0.0.1:`port` (HTTP), its SCORE_C checked."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    t = httpclient.InferInput("IMAGE", [1, 4], "FP32")
    t.set_data_from_numpy(x)
    out = client.infer("vision", [t]).as_numpy("SCORE_C")
    client.close()
    assert out.tolist() == [[float((2 * x + 1).sum())]]


def _serve(
    extra: list[str], file: Path = ROOT / "examples" / "fanout.yaml", env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int, list[str]]:
    http, grpc, metrics = free_ports(3)
    args = [
        str(CLI),
        "serve",
        str(file),
        "--cpu",
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc),
        "--metrics-port",
        str(metrics),
        *extra,
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("serving;"):
            return proc, http, lines
    proc.kill()
    pytest.fail("serve did not become ready:\n" + "".join(lines))


@pytest.mark.parametrize(
    ("sig", "router"),
    [(signal.SIGINT, "auto"), (signal.SIGTERM, "python")],
    ids=["ctrl-c-native-router", "sigterm-python-router"],
)
def test_serve_answers_then_stops_cleanly(sig, router):
    """The router runs on the native backend by default where gcc builds it (make system-deps installs
    gcc), on the Python backend with --router python; the answers are the same."""
    proc, http, lines = _serve(["--router", router])
    text = "".join(lines)
    backend = "python" if router == "python" or shutil.which("gcc") is None else "native"
    try:
        assert f"HTTP http://127.0.0.1:{http}" in text
        assert re.search(r"model vision__extract__FEATS_A__router\s+version 1\s+READY", text), text
        assert f"router vision__extract__FEATS_A__router ({backend}): extract.FEATS_A ->" in text, text
        repo = Path(re.search(r"generated files in (\S+)", text).group(1))
        assert repo.is_dir()
        infer_once(http)
    finally:
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "stopped (tritonserver exit code 0)" in rest
    assert not repo.parent.exists(), "the temporary repository is removed on exit"


def test_serve_runs_a_pipeline_with_conditions() -> None:
    """examples/conditional.yaml: the orchestrator and its parts load, a request takes its branch."""
    proc, http, lines = _serve([], file=ROOT / "examples" / "conditional.yaml")
    text = "".join(lines)
    try:
        for model in ("conditional", "conditional__head", "conditional__when0", "conditional__when1"):
            assert re.search(rf"model {model}\s+version 1\s+READY", text), text
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        x = np.array([[1, 2, 3, 4]], dtype=np.float32)  # sums above 0: the large branch
        t = httpclient.InferInput("IMAGE", [1, 4], "FP32")
        t.set_data_from_numpy(x)
        result = client.infer("conditional", [t])
        client.close()
        assert result.as_numpy("RESULT").tolist() == (3 * x - 2).tolist()
        assert result.as_numpy("SMALL").tolist() == [[0.0] * 4]  # the skipped branch's default
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest


def test_serve_on_an_ipv6_address_answers_on_every_endpoint():
    """`--host ::1`: tritonserver's HTTP and metrics endpoints take an IPv6 address only as `ipv6:ADDR`
    and its gRPC endpoint only in brackets (triton/addresses.py); serve writes both, so HTTP, gRPC and
    metrics answer on [::1], and the URLs it prints are ones a client can use."""
    import tritonclient.grpc as grpcclient

    proc, http, lines = _serve(["--host", "::1"])
    text = "".join(lines)
    try:
        urls = re.search(r"HTTP http://(\S+)\s+gRPC (\S+)\s+metrics (\S+)", text)
        assert urls is not None, text
        http_url, grpc_url, metrics_url = urls.groups()
        assert http_url == f"[::1]:{http}"
        x = np.array([[1, 2, 3, 4]], dtype=np.float32)
        client = httpclient.InferenceServerClient(http_url)
        t = httpclient.InferInput("IMAGE", [1, 4], "FP32")
        t.set_data_from_numpy(x)
        assert client.infer("vision", [t]).as_numpy("SCORE_C").tolist() == [[float((2 * x + 1).sum())]]
        client.close()
        grpc = grpcclient.InferenceServerClient(grpc_url)
        g = grpcclient.InferInput("IMAGE", [1, 4], "FP32")
        g.set_data_from_numpy(x)
        assert grpc.infer("vision", [g]).as_numpy("SCORE_C").tolist() == [[float((2 * x + 1).sum())]]
        grpc.close()
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            assert b"nv_inference_request_success" in response.read()
        with pytest.raises(OSError):  # one family per endpoint: IPv6 alone
            urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/live", timeout=2)
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest


def _imported_tutorials(tmp_path: Path) -> Path:
    """`tritonpipeline import examples/published/tutorials` (one model on the vllm backend)."""
    out = tmp_path / "tutorials.yaml"
    repo = ROOT / "examples" / "published" / "tutorials"
    command = [str(CLI), "import", str(repo), "-o", str(out)]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return out


def test_serve_refuses_a_backend_its_tritonserver_lacks(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(CLI), "serve", str(_imported_tutorials(tmp_path)), "--cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "spec.models[2].backend: backend 'vllm' is not among those of the tritonserver" in proc.stderr
    assert "(python in " in proc.stderr  # the wheel's only backend
    assert "starting tritonserver" not in proc.stdout


def test_serve_runs_a_tritonserver_tree_that_has_the_backend(tmp_path: Path) -> None:
    """TRITONPIPELINE_SERVER_HOME names a tree like NVIDIA's image: the wheel's binary and libraries,
    its backends, and the stand-in vllm backend of tests/backends."""
    home = tree_with_stand_in_backends(tmp_path / "home")
    env = {**os.environ, "TRITONPIPELINE_SERVER_HOME": str(home)}
    proc, _, lines = _serve([], file=_imported_tutorials(tmp_path), env=env)
    try:
        assert re.search(r"model vllm_model\s+version 1\s+READY", "".join(lines)), "".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest


def test_serve_port_in_use_fails_before_any_model_loads():
    """tritonserver found a taken port only after every model had loaded (minutes with large models),
    then ended with 60 lines of log; serve now names the flag and the address before it starts."""
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        http, grpc = [p for p in free_ports(3) if p != busy][:2]
        args = [
            str(CLI), "serve", str(ROOT / "examples" / "fanout.yaml"), "--cpu", "--http-port", str(http),
            "--grpc-port", str(grpc), "--metrics-port", str(busy),
        ]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"error: --metrics-port {busy}: 127.0.0.1:{busy} cannot be bound" in proc.stderr
    assert "starting tritonserver" not in proc.stdout and time.monotonic() - started < 60


SLOW_INIT = "    def initialize(self, args):\n        import time\n        time.sleep(300)\n\n"


def test_ctrl_c_while_the_models_load_stops_at_once(tmp_path: Path) -> None:
    """A model whose initialize takes minutes: Ctrl-C was ignored until the load ended (then serve
    printed 'serving' and stopped). Now it says how the load goes meanwhile, stops within seconds, says
    which model was loading, exits 130 and leaves no process and no shared memory behind."""
    models = tmp_path / "models"
    shutil.copytree(ROOT / "model_repository", models)
    source = models / "head_c" / "1" / "model.py"
    text = source.read_text()
    source.write_text(text.replace("class TritonPythonModel:\n", "class TritonPythonModel:\n" + SLOW_INIT, 1))
    http, grpc, metrics = free_ports(3)
    args = [
        str(CLI), "serve", str(ROOT / "examples" / "diamond.yaml"), "--cpu", "--models", str(models),
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the server runs; its log says when head_c starts loading
            lines.append(line)
            if line.startswith("starting tritonserver"):
                break
        # issue 55: serve says how the load goes every few seconds (it was silent for the whole load)
        progress = re.compile(r"^  \.\.\. \d+s: \d+ of \d+ models done; waiting for .*\bhead_c\b")
        for line in proc.stdout:
            lines.append(line)
            if progress.match(line):
                break
        assert progress.match(lines[-1]), "".join(lines)
        tree = _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + rest
    # head_c, whose initialize takes minutes, is among those not ready (under load the others may be too)
    not_ready = re.search(r"interrupted while the models load \(not ready: ([^)]*)\)", rest)
    assert not_ready is not None and "head_c" in not_ready.group(1).split(", "), rest
    assert "serving;" not in rest
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in tree if _alive(pid)]
    # issue 55: stopped during the load, it left its Python backend's regions in /dev/shm
    assert not sorted(Path("/dev/shm").glob(f"tp{proc.pid}_*"))


def _descendants(pid: int) -> list[int]:
    """Every live descendant of pid (Linux /proc), children first."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_descendants(child)]
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that is not ours counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_serve_killed_by_sigkill_takes_tritonserver_with_it():
    """SIGKILL gives serve no chance to stop its server: the kernel must (parent-death signal)."""
    proc, _, lines = _serve([])
    tree = _descendants(proc.pid)
    servers = [pid for pid in tree if "bin/tritonserver" in _cmdline(pid)]
    workdir = Path(re.search(r"generated files in (\S+)", "".join(lines)).group(1)).parent
    log = Path(re.search(r"starting tritonserver \(log: (\S+)\)", "".join(lines)).group(1))
    try:
        assert len(servers) == 1, [(pid, _cmdline(pid)) for pid in tree]
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [(pid, _cmdline(pid)) for pid in tree if _alive(pid)]
        assert not left, f"still running after serve was killed: {left}"
    finally:
        for pid in tree:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)  # killed, serve could remove nothing
        log.unlink(missing_ok=True)


# issue 55: one model, so that a server starts in about 2 s; its model.py is the test's
ONE_MODEL_PIPELINE = """\
apiVersion: serving.tritonpipeline.io/v1alpha1
kind: TritonPipeline
metadata: {name: one}
spec:
  modelRepository: {uri: models}
  models:
    - name: head_c
      backend: python
      maxBatchSize: 8
      inputs:  [{name: FEATS_IN_C, dataType: FP32, dims: [4]}]
      outputs: [{name: OUTPUT_C, dataType: FP32, dims: [1]}]
  pipelines:
    - name: one
      inputs: [{name: IN, dataType: FP32, dims: [4]}]
      steps: [{model: head_c, inputs: {FEATS_IN_C: inputs.IN}}]
      outputs: [{name: OUT, from: head_c.OUTPUT_C}]
"""
MODEL_PY = """\
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({init})

    def execute(self, requests):
        Path({mark!r}).touch()
        time.sleep({run})
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "FEATS_IN_C").as_numpy()
            out = x.sum(axis=-1, keepdims=True).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT_C", out)]))
        return responses
"""
SERVE_LOG = "tritonpipeline-serve-one-*.log"  # the log serve keeps after a failure, in $TMPDIR
PYTHON_ENVS = "/tmp/python_env_*"  # the Python backend's directory: /tmp whatever $TMPDIR says


class OneModel:
    """`serve` of ONE_MODEL_PIPELINE in a directory of the test's, with a $TMPDIR of its own (empty), and
    what to look at afterwards: that $TMPDIR, /dev/shm and the Python backend's directories."""

    def __init__(self, tmp_path: Path, model_py: str, *extra: str) -> None:
        self.root, self.tmp = tmp_path, tmp_path / "tmp"
        self.tmp.mkdir()
        version = tmp_path / "models" / "head_c" / "1"
        version.mkdir(parents=True)
        (version / "model.py").write_text(model_py)
        (tmp_path / "pipeline.yaml").write_text(ONE_MODEL_PIPELINE)
        self.envs_before, self.since = set(glob.glob(PYTHON_ENVS)), time.time()
        http, grpc, metrics = free_ports(3)
        self.http = http
        args = [
            str(CLI), "serve", "pipeline.yaml", "--cpu", "--router", "python", "--http-port", str(http),
            "--grpc-port", str(grpc), "--metrics-port", str(metrics), *extra,
        ]  # fmt: skip
        env = {**os.environ, "TMPDIR": str(self.tmp)}
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env
        )
        self.lines: list[str] = []

    def read_until(self, prefix: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(prefix):
                return
        pytest.fail(f"no line {prefix!r}:\n{''.join(self.lines)}{self.proc.stderr.read()}")  # type: ignore[union-attr]

    def finish(self, sig: int | None = signal.SIGINT) -> str:
        """Send `sig` (None: none), wait for serve to end; its stderr."""
        if sig is not None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.lines.append(out)
        return err

    def left_behind(self) -> list[str]:
        """What serve made and left: in its $TMPDIR, its Python backend's regions in /dev/shm, and a new
        Python-backend directory in /tmp."""
        left = [str(p) for p in self.tmp.iterdir()]
        left += [str(p) for p in Path("/dev/shm").glob(f"tp{self.proc.pid}_*")]
        for path in set(glob.glob(PYTHON_ENVS)) - self.envs_before:
            with contextlib.suppress(OSError):
                left += [path] if os.stat(path).st_mtime >= self.since else []
        return sorted(left)


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


BROKEN_MODELS = {
    # the SyntaxError Triton logs names model.py without its directory: serve finds it in the version's
    "syntax-error": (
        "import numpy as np (\n",
        r"SyntaxError: invalid syntax \(models/head_c/1/model\.py line 1\)",
    ),
    # an exception in initialize: the innermost frame of the traceback in the model's own code
    "raised-in-initialize": (
        "class TritonPythonModel:\n    def initialize(self, args):\n        self.load()\n\n"
        "    def load(self):\n        raise ValueError('no weights in /nowhere')\n",
        r"ValueError: no weights in /nowhere \(models/head_c/1/model\.py line 6\)",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_MODELS))
def test_a_model_that_fails_to_load_is_one_line_naming_its_file(tmp_path: Path, case: str) -> None:
    """Issue 55: a model that failed to load printed about 60 lines of Triton's log, the cause buried and
    no file named. Now: one line with the model, the version, the cause, the user's file and line, and
    the full log, which alone is kept. About 4 s each (a tritonserver that exits after the load)."""
    model_py, cause = BROKEN_MODELS[case]
    serve = OneModel(tmp_path, model_py)
    err = serve.finish(sig=None)
    assert serve.proc.returncode == 3, "".join(serve.lines) + err
    (line,) = err.splitlines()
    log = re.escape(str(tmp_path / "tmp")) + r"/tritonpipeline-serve-one-\w+\.log"
    assert re.fullmatch(rf"error: model head_c version 1 failed to load: {cause}; full log: {log}", line), err
    kept = line.rsplit("full log: ", 1)[1]
    assert "failed to load 'head_c'" in Path(kept).read_text()
    Path(kept).unlink()  # the one thing left, named: nothing else
    assert not serve.left_behind()


def test_nothing_is_left_after_ctrl_c_before_the_server_starts(tmp_path: Path) -> None:
    """Ctrl-C as soon as the repository is written (at once the server starts, or before): about 2 s."""
    serve = OneModel(tmp_path, MODEL_PY.format(init=0, mark="/dev/null", run=0))
    serve.read_until("compiled ")
    err = serve.finish()
    assert serve.proc.returncode in (0, 130), "".join(serve.lines) + err
    assert not serve.left_behind()


def test_nothing_is_left_after_ctrl_c_while_the_model_loads(tmp_path: Path) -> None:
    """Ctrl-C once the model's Python process runs (its shared memory made) and its initialize sleeps:
    tritonserver ends at SIGTERM without finalizing its backends, so serve removes their regions and the
    Python backend's /tmp directory. About 4 s."""
    serve = OneModel(tmp_path, MODEL_PY.format(init=300, mark="/dev/null", run=0))
    serve.read_until("starting tritonserver")
    _wait_for(lambda: list(Path("/dev/shm").glob(f"tp{serve.proc.pid}_*")), "the Python backend's regions")
    err = serve.finish()
    assert serve.proc.returncode == 130, "".join(serve.lines) + err
    assert "interrupted while the models load (not ready: head_c)" in err
    assert not serve.left_behind()


def test_nothing_is_left_after_ctrl_c_during_a_request(tmp_path: Path) -> None:
    """Ctrl-C while a request runs: tritonserver finishes it (--exit-timeout), then everything goes.
    About 7 s: the request takes 1, tritonserver's shutdown looks at what is left once a second."""
    mark = tmp_path / "executing"
    serve = OneModel(tmp_path, MODEL_PY.format(init=0, mark=str(mark), run=1))
    serve.read_until("serving;")
    client = httpclient.InferenceServerClient(f"127.0.0.1:{serve.http}")
    tensor = httpclient.InferInput("IN", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
    answer = client.async_infer("one", [tensor])
    _wait_for(mark.exists, "the request to reach the model")
    serve.proc.send_signal(signal.SIGINT)
    assert answer.get_result().as_numpy("OUT").tolist() == [[10.0]]
    client.close()  # tritonserver waits for its open connections too, up to --exit-timeout
    err = serve.finish(sig=None)
    assert serve.proc.returncode == 0, "".join(serve.lines) + err
    assert "stopped (tritonserver exit code 0)" in serve.lines[-1]
    assert not serve.left_behind()


def test_timeout_keeps_only_the_log_it_names(tmp_path: Path) -> None:
    """--timeout while the model loads: one error line naming the model not ready and the log, which is
    all that is left. About 4 s."""
    serve = OneModel(tmp_path, MODEL_PY.format(init=300, mark="/dev/null", run=0), "--timeout", "2")
    err = serve.finish(sig=None)
    assert serve.proc.returncode == 3, "".join(serve.lines) + err
    (line,) = err.splitlines()
    log = re.escape(str(tmp_path / "tmp")) + r"/tritonpipeline-serve-one-\w+\.log"
    assert re.fullmatch(
        rf"error: tritonserver not ready after 2s \(not ready: head_c\); full log: {log}", line
    )
    Path(line.rsplit("full log: ", 1)[1]).unlink()
    assert not serve.left_behind()
