"""Check a served pipeline's numbers over HTTP (tritonpipeline.client, the product's own client).

With `--spec`, any pipeline built from the models in model_repository/ is checked: the CR's graph is
evaluated here with what each of those models computes (REFERENCE, from their docstrings), on a seeded
random request, and every pipeline output is compared with Triton's answer. A pipeline with a
sequence-batched model gets interleaved sequences (each keeps its own state). Without `--spec`, the
fixed checks of `make e2e-local` (CHECKS below) by pipeline name. `--loop` repeats the checks until
SIGINT/SIGTERM and prints the counts as one JSON line (a client sending requests during a rollout).

    .venv/bin/python e2e/infer.py --url 10.96.0.12:8000 --spec examples/diamond.yaml [PIPELINE ...]
    .venv/bin/python e2e/infer.py --url 127.0.0.1:18000 vision [diamond ...]
    .venv/bin/python e2e/infer.py --url ... --spec CR.json --loop
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

Tensors = dict[str, np.ndarray]


def _accumulate(t: Tensors, state: dict[str, Any]) -> Tensors:
    state["total"] = state.get("total", 0) + t["VALUE"]
    return {"TOTAL": state["total"]}


# what each model of model_repository/ computes, written from its docstring; `state` is the model's
# state for the current sequence (a fresh dict at sequence start), unused by stateless models
REFERENCE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "extractor": lambda t, s: {"FEATS_A": 2 * t["INPUT_A"] + 1},
    "head_b": lambda t, s: {"OUTPUT_B": 3 * t["FEATS_IN_B"] - 2},
    "head_c": lambda t, s: {"OUTPUT_C": t["FEATS_IN_C"].sum(axis=-1, keepdims=True)},
    "join": lambda t, s: {"JOINED": t["LEFT"] - t["RIGHT"]},
    "dequantize": lambda t, s: {"VALUE": t["CODES"].astype(np.float32) * 0.5},
    "accumulator": _accumulate,
    "classifier": lambda t, s: {"LABEL": (t["X"].sum(axis=-1, keepdims=True) > 0).astype(np.int32)},
}
OPERATORS = ("equals", "in", "greaterThan", "lessThan")
NUMPY_TYPES = {
    "FP32": np.float32,
    "FP64": np.float64,
    "FP16": np.float16,
    "INT32": np.int32,
    "INT64": np.int64,
}
BATCH = 2  # rows of a stateless request
SEQUENCE_STEPS = 3  # requests per sequence; two sequences are interleaved


class Pipeline:
    """One pipeline of a TritonPipeline CR and how to compute its outputs with REFERENCE."""

    def __init__(self, spec: dict[str, Any], pipeline: dict[str, Any]) -> None:
        self.name: str = pipeline["name"]
        self.inputs: list[dict[str, Any]] = pipeline["inputs"]
        self.outputs: list[dict[str, Any]] = pipeline["outputs"]
        self.steps = [
            (s.get("name") or s["model"], s["model"], s.get("inputs", {})) for s in pipeline["steps"]
        ]
        unknown = sorted({model for _, model, _ in self.steps} - REFERENCE.keys())
        if unknown:
            raise ValueError(
                f"pipeline {self.name}: no reference for models {unknown} (e2e/infer.py REFERENCE)"
            )
        models = {m["name"]: m for m in spec["models"]}
        self.stateful = any("sequenceBatching" in models[model] for _, model, _ in self.steps)
        self.guards = _guards(
            pipeline
        )  # step -> (the tensor its condition reads, as the orchestrator's plan)
        self.output_dims = {
            f"{step}.{o['name']}": o["dims"]
            for step, model, _ in self.steps
            for o in models[model]["outputs"]
        }

    def request(self, rng: np.random.Generator, rows: int) -> Tensors:
        """A random request: every pipeline input, `rows` rows of its dims (-1 taken as 4)."""
        feed = {}
        for tensor in self.inputs:
            shape = [rows, *(4 if d == -1 else d for d in tensor["dims"])]
            dtype = NUMPY_TYPES[tensor["dataType"]]
            if np.issubdtype(dtype, np.integer):
                feed[tensor["name"]] = rng.integers(-100, 100, size=shape).astype(dtype)
            else:
                feed[tensor["name"]] = rng.uniform(-4, 4, size=shape).round(2).astype(dtype)
        return feed

    def expected(self, feed: Tensors, states: dict[str, dict[str, Any]]) -> dict[str, np.ndarray | None]:
        """The pipeline outputs for `feed`, evaluating the steps in dependency order; a step whose
        condition (a `when`, a switch's case) does not hold is skipped, and an output none of whose
        sources ran is its default, or None (left out of the response)."""
        values = {f"inputs.{k}": v for k, v in feed.items()}
        pending = list(self.steps)
        while pending:
            skipped = [s for s in pending if s[0] in self.guards and self._skips(s[0], values)]
            ready = [
                s
                for s in pending
                if s not in skipped
                and all(ref in values for ref in s[2].values())
                and (s[0] not in self.guards or self.guards[s[0]][0] in values)
            ]
            if not ready and not skipped:
                raise ValueError(f"pipeline {self.name}: steps {[s[0] for s in pending]} never get inputs")
            for s in skipped:
                pending.remove(s)
            for step, model, wiring in ready:
                args = {port: values[ref] for port, ref in wiring.items()}
                out = REFERENCE[model](args, states.setdefault(step, {}))
                values.update({f"{step}.{k}": v for k, v in out.items()})
                pending.remove((step, model, wiring))
        rows = len(next(iter(feed.values())))
        return {o["name"]: self._output(o, values, rows) for o in self.outputs}

    def _skips(self, step: str, values: Tensors) -> bool:
        """Whether a guarded step is skipped, once its condition's tensor is known (one value a request)."""
        from tritonpipeline.compiler.orchestrator_model import holds_guard

        tensor, when = self.guards[step]
        if tensor not in values:
            return False
        found = {holds_guard(when, v) for v in values[tensor].reshape(-1)}
        if len(found) > 1:
            raise ValueError(f"pipeline {self.name}: the rows of one request disagree on {tensor}")
        return found == {False}

    def _output(self, output: dict[str, Any], values: Tensors, rows: int) -> np.ndarray | None:
        sources = [output["from"], *output.get("orFrom", [])]
        ran = [values[ref] for ref in sources if ref in values]
        if ran:
            return ran[0]
        if output.get("default") is None:
            return None
        return np.full([rows, *self.output_dims[sources[0]]], output["default"], dtype=np.float32)


def _comparison(entry: dict[str, Any]) -> dict[str, Any]:
    (operator,) = [k for k in OPERATORS if k in entry]
    return {"operator": operator, "value": entry[operator]}


def _guards(pipeline: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each guarded step -> (its condition's tensor, the guard as compiler/orchestrator_model.py reads it)."""
    guards = {}
    for s in pipeline["steps"]:
        if "when" in s:
            guards[s.get("name") or s["model"]] = (
                s["when"]["tensor"],
                {**_comparison(s["when"]), "unless": []},
            )
    for switch in pipeline.get("switch", []):
        earlier: list[dict[str, Any]] = []
        for case in switch["cases"]:
            for step in case["steps"]:
                guards[step] = (switch["tensor"], {**_comparison(case), "unless": list(earlier)})
            earlier.append(_comparison(case))
        for step in switch.get("default", []):
            guards[step] = (switch["tensor"], {"operator": None, "value": None, "unless": list(earlier)})
    return guards


class Checker:
    """Sends checked requests for the pipelines of one CR through one client (one connection pool)."""

    def __init__(self, url: str, spec: dict[str, Any], seed: int = 0) -> None:
        from tritonpipeline.client import TritonClient

        # a ClusterIP kube-proxy has not programmed yet does not answer: give up soon, the caller polls
        self.client = TritonClient(url, protocol="http", connection_timeout=5.0, network_timeout=30.0)
        self.rng = np.random.default_rng(seed)
        self.pipelines = {p["name"]: Pipeline(spec, p) for p in spec["pipelines"]}
        self.sequence_ids = itertools.count(int(self.rng.integers(1, 1 << 30)) * 16)

    def _infer(self, pipeline: Pipeline, feed: Tensors, **sequence: Any) -> Tensors:
        inputs = [self.client.input(k, v) for k, v in feed.items()]
        result = self.client.infer(pipeline.name, inputs, **sequence)
        return {o["name"]: result.as_numpy(o["name"]) for o in pipeline.outputs}

    @staticmethod
    def _compare(pipeline: Pipeline, got: Tensors, want: dict[str, np.ndarray | None], what: str) -> None:
        for name, value in want.items():
            if value is None:  # a skipped branch's output: left out of the response
                if got[name] is not None:
                    raise AssertionError(f"{pipeline.name} {what}: {name} = {got[name]!r}, expected none")
            elif got[name] is None or not np.allclose(got[name], value, rtol=1e-5, atol=1e-5):
                raise AssertionError(f"{pipeline.name} {what}: {name} = {got[name]!r}, expected {value!r}")

    def check(self, name: str) -> str:
        pipeline = self.pipelines[name]
        if pipeline.stateful:
            return self._check_sequences(pipeline)
        rows = 1 if pipeline.guards else BATCH  # a condition is one value a request
        feed = pipeline.request(self.rng, rows)
        self._compare(pipeline, self._infer(pipeline, feed), pipeline.expected(feed, {}), "stateless request")
        return f"{', '.join(o['name'] for o in pipeline.outputs)} checked for a batch of {rows}"

    def _check_sequences(self, pipeline: Pipeline) -> str:
        """Two sequences interleaved request by request; each must keep its own running state."""
        ids = [next(self.sequence_ids), next(self.sequence_ids)]
        states: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in ids}
        for k in range(SEQUENCE_STEPS):
            for seq in ids:
                feed = pipeline.request(self.rng, 1)
                got = self._infer(
                    pipeline,
                    feed,
                    sequence_id=seq,
                    sequence_start=k == 0,
                    sequence_end=k == SEQUENCE_STEPS - 1,
                )
                self._compare(
                    pipeline, got, pipeline.expected(feed, states[seq]), f"sequence {seq} request {k}"
                )
        return f"{len(ids)} interleaved sequences of {SEQUENCE_STEPS} requests, each state kept"

    def close(self) -> None:
        self.client.close()


def load_spec(path: Path) -> dict[str, Any]:
    """The `spec` of a TritonPipeline CR file (YAML or JSON)."""
    doc = yaml.safe_load(path.read_text())
    return dict(doc["spec"])


def check_once(checker: Checker, names: list[str]) -> int:
    failed = 0
    for name in names:
        try:
            print(f"PASS {name}: {checker.check(name)}", flush=True)
        except Exception as exc:  # report every pipeline, then fail
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
    return 1 if failed else 0


def check_until_stopped(checker: Checker, names: list[str]) -> int:
    """Check the pipelines in turn until SIGINT/SIGTERM; print the counts (and the first errors) as JSON."""
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    ok, errors, t0 = 0, [], time.monotonic()
    for name in itertools.cycle(names):
        if stop:
            break
        try:
            checker.check(name)
            ok += 1
        except Exception as exc:  # counted: the point is how many fail
            errors.append(f"{time.monotonic() - t0:.2f}s {name}: {type(exc).__name__}: {exc}"[:300])
    summary = {
        "ok": ok,
        "failed": len(errors),
        "seconds": round(time.monotonic() - t0, 1),
        "errors": errors[:10],
    }
    print(json.dumps(summary), flush=True)
    return 0


# --- the fixed checks by pipeline name (`make e2e-local`, e2e/local.py) ---


def _fanout(client: Any, name: str) -> str:
    import numpy as np
    import tritonclient.http as httpclient

    x = np.array([[1, 2, 3, 4], [0.5, -1, 2, 8]], dtype=np.float32)
    t = httpclient.InferInput("IMAGE", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    r = client.infer(name, [t])
    feats = 2 * x + 1
    np.testing.assert_allclose(r.as_numpy("FEATURES"), feats)
    np.testing.assert_allclose(r.as_numpy("SCORE_B"), 3 * feats - 2)
    np.testing.assert_allclose(r.as_numpy("SCORE_C"), feats.sum(axis=1, keepdims=True))
    return f"FEATURES=2x+1, SCORE_B=3(2x+1)-2, SCORE_C=sum(2x+1) for batch {x.shape[0]}"


def _diamond(client: Any, name: str) -> str:
    import numpy as np
    import tritonclient.http as httpclient

    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    t = httpclient.InferInput("IMAGE", [1, 4], "FP32")
    t.set_data_from_numpy(x)
    r = client.infer(name, [t])
    feats = 2 * x + 1
    np.testing.assert_allclose(r.as_numpy("RESULT"), (3 * feats - 2) - feats.sum(axis=1, keepdims=True))
    return f"RESULT={r.as_numpy('RESULT').tolist()[0]} = (3(2x+1)-2) - sum(2x+1)"


def _streaming(client: Any, name: str) -> str:
    import numpy as np
    import tritonclient.http as httpclient

    totals: dict[int, float] = {}
    # two interleaved sequences must keep separate running sums (sequence batching)
    for k, (seq, code) in enumerate([(11, 4), (22, 100), (11, -2), (22, 1), (11, 10)]):
        t = httpclient.InferInput("CHUNK", [1, 1], "INT32")
        t.set_data_from_numpy(np.array([[code]], dtype=np.int32))
        first = seq not in totals
        last = k >= 3
        r = client.infer(name, [t], sequence_id=seq, sequence_start=first, sequence_end=last)
        totals[seq] = totals.get(seq, 0.0) + code / 2
        got = float(r.as_numpy("TOTAL")[0, 0])
        assert abs(got - totals[seq]) < 1e-6, f"sequence {seq}: TOTAL {got} != {totals[seq]}"
    return f"running sums per sequence {totals}"


CHECKS: dict[str, Callable[[Any, str], str]] = {
    "vision": _fanout,
    "diamond": _diamond,
    "streaming": _streaming,
}


def fixed_checks(url: str, names: list[str]) -> int:
    """The named checks of `make e2e-local` (CHECKS)."""
    import tritonclient.http as httpclient

    unknown = sorted(set(names) - CHECKS.keys())
    if unknown:
        print(f"no fixed check for {unknown}: give the CR with --spec (known: {sorted(CHECKS)})")
        return 2
    client = httpclient.InferenceServerClient(url)
    failed = 0
    try:
        for name in names:
            try:
                print(f"PASS {name}: {CHECKS[name](client, name)}")
            except Exception as exc:  # report every pipeline, then fail
                failed += 1
                print(f"FAIL {name}: {type(exc).__name__}: {exc}")
    finally:
        client.close()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="HOST:PORT of Triton's HTTP endpoint")
    parser.add_argument(
        "--spec", type=Path, help="the TritonPipeline CR (YAML/JSON) whose pipelines are served"
    )
    parser.add_argument(
        "--loop", action="store_true", help="repeat until SIGINT/SIGTERM; print counts as JSON"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random requests (%(default)s)")
    parser.add_argument("pipelines", nargs="*", help="pipeline names (default with --spec: all of the CR's)")
    args = parser.parse_args(argv)
    if args.spec is None:
        if args.loop or not args.pipelines:
            parser.error("without --spec, name the pipelines to check (and no --loop)")
        return fixed_checks(args.url, args.pipelines)
    try:
        checker = Checker(args.url, load_spec(args.spec), args.seed)
    except (OSError, ValueError, KeyError, yaml.YAMLError) as err:
        print(f"cannot check {args.spec}: {err}", file=sys.stderr)
        return 2
    names = args.pipelines or list(checker.pipelines)
    try:
        return check_until_stopped(checker, names) if args.loop else check_once(checker, names)
    finally:
        checker.close()


if __name__ == "__main__":
    sys.exit(main())
