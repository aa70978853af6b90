"""The chart's own test (`helm test`, charts/triton-pipeline/templates/tests/): proof that an installed
operator turns a TritonPipeline into an answered request, in the cluster as the chart installed it.

Two pods run it in turn, in the operator's image, on a volume claim of the test's own:

- `write-model DIR` writes a one-model Python repository (`double`: Y = 2 * X) into DIR, the claim;
- `run` applies a TritonPipeline of two steps over that model (`quadruple`: OUT = 4 * IN, an ensemble the
  operator compiles), waits until it is Ready, sends one inference to its Service and checks the answer, then
  deletes the pipeline. Each step prints one line; a failure prints `error:` and the cause (the pipeline's
  conditions when it never became Ready) and exits 1, which `helm test` reports with the pod's log.

The pipeline runs on CPU (no GPU requested), so the test answers on any cluster whose default StorageClass
can bind the claim and whose nodes can pull the Triton image the operator uses by default."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ..kube.api_client import Kube, KubeError, api_client
from ..settings import API_VERSION, KIND

MODEL = "double"
PIPELINE = "quadruple"
REPOSITORY = "repository"  # the folder of the claim the pipeline's modelRepository names
INPUT = [1.0, 2.0, 3.0, 4.0]
MODEL_PY = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Y = 2 * X: written by the chart's test (tritonpipeline.runtime.chart_test)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (2 * x).astype(np.float32))]))
        return responses
'''


def say(line: str) -> None:
    print(line, flush=True)


def write_model(directory: Path) -> Path:
    """The repository the test's pipeline serves, under `directory`/REPOSITORY; returns the model file."""
    version = directory / REPOSITORY / MODEL / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.py").write_text(MODEL_PY)
    return version / "model.py"


def pipeline(name: str, namespace: str, claim: str) -> dict[str, Any]:
    """The test's TritonPipeline: the model twice in a row, on CPU, from `claim`."""
    tensor = {"dataType": "FP32", "dims": [len(INPUT)]}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/component": "chart-test"},
        },
        "spec": {
            "server": {"replicas": 1, "gpus": 0},
            "modelRepository": {"uri": f"pvc://{claim}/{REPOSITORY}"},
            "models": [
                {
                    "name": MODEL,
                    "backend": "python",
                    "maxBatchSize": 8,
                    "inputs": [{"name": "X", **tensor}],
                    "outputs": [{"name": "Y", **tensor}],
                    "instances": [{"kind": "CPU", "count": 1}],
                }
            ],
            "pipelines": [
                {
                    "name": PIPELINE,
                    "inputs": [{"name": "IN", **tensor}],
                    "steps": [
                        {"name": "first", "model": MODEL, "inputs": {"X": "inputs.IN"}},
                        {"name": "second", "model": MODEL, "inputs": {"X": "first.Y"}},
                    ],
                    "outputs": [{"name": "OUT", "from": "second.Y"}],
                }
            ],
        },
    }


def expected() -> list[float]:
    return [4 * x for x in INPUT]


def request_body() -> dict[str, Any]:
    return {"inputs": [{"name": "IN", "shape": [1, len(INPUT)], "datatype": "FP32", "data": INPUT}]}


def answer_problem(answer: dict[str, Any]) -> str | None:
    """Why `answer` (Triton's JSON infer response) is not the test's, or None."""
    outputs = {o.get("name"): o for o in answer.get("outputs", [])}
    if "OUT" not in outputs:
        return f"no output OUT in the answer (outputs: {sorted(str(n) for n in outputs)})"
    got = [float(v) for v in outputs["OUT"].get("data", [])]
    if got != expected():
        return f"OUT is {got}, expected {expected()}"
    return None


def conditions(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((obj or {}).get("status", {}).get("conditions") or [])


def condition_of(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    """The condition of type `ctype` in `obj`'s status ({} when there is none)."""
    return next((dict(c) for c in conditions(obj) if c.get("type") == ctype), {})


def spec_refused(obj: dict[str, Any] | None) -> str | None:
    """The operator's reason for refusing the spec (SpecValid False: no waiting changes it), or None."""
    valid = condition_of(obj, "SpecValid")
    return (
        f"{valid.get('reason', '')}: {valid.get('message', '')}" if valid.get("status") == "False" else None
    )


def conditions_text(obj: dict[str, Any] | None) -> str:
    return "; ".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}"
        for c in conditions(obj)
    )


def service_url(service: dict[str, Any]) -> str:
    ip = service["spec"]["clusterIP"]
    port = next(p["port"] for p in service["spec"]["ports"] if p.get("name") == "http")
    return f"http://{f'[{ip}]' if ':' in ip else ip}:{port}"


def infer(url: str, timeout: float) -> dict[str, Any]:
    """POST one request to the pipeline's ensemble; retried while the Service has no ready endpoint yet."""
    deadline = time.monotonic() + timeout
    body = json.dumps(request_body()).encode()
    while True:
        request = urllib.request.Request(
            f"{url}/v2/models/{PIPELINE}/infer", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return dict(json.loads(response.read()))
        except (urllib.error.URLError, OSError) as err:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer from {url} in {timeout:.0f}s: {err}") from err
            time.sleep(2)


def run(namespace: str, name: str, claim: str, timeout: float) -> int:
    kube = Kube(api_client(), field_manager="tritonpipeline-chart-test")
    kube.apply(pipeline(name, namespace, claim))
    say(f"applied TritonPipeline {namespace}/{name} (models from pvc://{claim}/{REPOSITORY})")
    try:
        t0 = time.monotonic()
        obj: dict[str, Any] | None = None
        while time.monotonic() - t0 < timeout:
            obj = kube.get(API_VERSION, KIND, namespace, name)
            if condition_of(obj, "Ready").get("status") == "True":
                break
            if refused := spec_refused(obj):
                say(f"error: {namespace}/{name} refused by the operator: {refused}")
                return 1
            time.sleep(3)
        else:
            why = conditions_text(obj) or "no status"
            say(f"error: {namespace}/{name} not Ready after {timeout:.0f}s: {why}")
            return 1
        say(f"Ready after {time.monotonic() - t0:.0f}s")
        service = kube.get("v1", "Service", namespace, name)
        if service is None:
            say(f"error: Ready, but no Service {namespace}/{name}")
            return 1
        url = service_url(service)
        answer = infer(url, timeout=120)
        if problem := answer_problem(answer):
            say(f"error: {PIPELINE} at {url}: {problem}")
            return 1
        say(f"{PIPELINE} at {url} answered OUT = {expected()} for IN = {INPUT}")
        return 0
    finally:
        kube.delete(API_VERSION, KIND, namespace, name)
        say(f"deleted TritonPipeline {namespace}/{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonpipeline.runtime.chart_test", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write-model", help="write the test's model repository into DIR")
    write.add_argument("directory", type=Path)
    go = sub.add_parser("run", help="apply the test's pipeline, wait for Ready, infer once, delete it")
    go.add_argument("--namespace", required=True)
    go.add_argument("--name", required=True)
    go.add_argument("--claim", required=True, help="the PersistentVolumeClaim write-model wrote into")
    go.add_argument("--timeout", type=float, default=600, help="seconds to wait for Ready (default 600)")
    args = parser.parse_args(argv)
    try:
        if args.command == "write-model":
            say(f"wrote {write_model(args.directory)}")
            return 0
        return run(args.namespace, args.name, args.claim, args.timeout)
    except (KubeError, RuntimeError, OSError) as err:
        say(f"error: {err}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
