"""The gpuUtilization autoscaling query on GPU metrics a real GPU exported (bench/results/gpu-metrics.prom,
written by `make gpu-check`: Triton's /metrics scraped idle, every second under load, and idle again).

The scrapes are imported into a real Prometheus (Debian) with its own `promtool tsdb
create-blocks-from openmetrics`, labelled as Kubernetes service discovery labels a pipeline's pod, and
the operator's query and the chart's prometheus-adapter rule are evaluated at each scrape's time."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.prometheus import Prometheus
from helpers import ROOT
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.spec import load_file

SCRAPES = ROOT / "bench" / "results" / "gpu-metrics.prom"
PIPELINE = ROOT / "bench" / "gpu" / "pipeline.yaml"
NAMESPACE = "ml"
POD = "gpu-check-6f7c9d8b5d-k2x4q"  # a Deployment pod name: NAME-<pod-template-hash>-<suffix>


def read_scrapes() -> list[tuple[float, str, dict[str, float], list[str]]]:
    """(time, phase, {series name: value of the first GPU}, nv_gpu_* sample lines) per scrape."""
    scrapes: list[tuple[float, str, dict[str, float], list[str]]] = []
    for line in SCRAPES.read_text().splitlines():
        if line.startswith("# SCRAPE "):
            _, _, at, phase = line.split()
            scrapes.append((float(at), phase, {}, []))
        elif line.startswith("nv_gpu_"):
            name = line.split("{", 1)[0]
            scrapes[-1][2].setdefault(name, float(line.rsplit(" ", 1)[1]))
            scrapes[-1][3].append(line)
    return scrapes


def openmetrics(scrapes, shift: float) -> str:
    """The GPU samples as OpenMetrics with the pod's labels and each scrape's (shifted) time."""
    out = [f"# TYPE {name} gauge" for name in sorted({n for s in scrapes for n in s[2]})]
    by_name: dict[str, list[str]] = {}
    for at, _, _, lines in scrapes:
        for line in lines:
            series, value = line.rsplit(" ", 1)
            name, labels = series.split("{", 1)
            labels = f'namespace="{NAMESPACE}",pod="{POD}",{labels}'
            by_name.setdefault(name, []).append(f"{name}{{{labels} {value} {at + shift:.3f}")
    for name in sorted(by_name):  # OpenMetrics wants each metric family in one block
        out += by_name[name]
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture
def prometheus_with_gpu_scrapes(prometheus_dir: Path, tmp_path: Path):
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    scrapes = read_scrapes()
    shift = (time.time() - 600) - scrapes[-1][0]  # recorded on the GPU host; moved into the last 10 minutes
    source = tmp_path / "gpu.om"
    source.write_text(openmetrics(scrapes, shift))
    data = prometheus_dir / "data"
    data.mkdir(parents=True)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)], check=True
    )
    with Prometheus(prometheus_dir, []) as prom:
        yield prom, [(at + shift, phase, values) for at, phase, values, _ in scrapes]


@pytest.mark.prometheus
def test_gpu_utilization_query_on_gpu_scrapes(prometheus_with_gpu_scrapes):
    prom, scrapes = prometheus_with_gpu_scrapes
    tp = load_file(str(PIPELINE))[0]
    query = autoscaling_objects.pipeline_query(tp, "gpuUtilization", namespace=NAMESPACE)
    (rule,) = [
        r
        for r in autoscaling_objects.adapter_rules()["rules"]
        if r["name"]["as"] == "triton_gpu_utilization_percent"
    ]
    adapter = rule["metricsQuery"].replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod="{POD}"')
    adapter = adapter.replace("<<.GroupBy>>", "pod")
    assert rule["seriesQuery"].startswith("nv_gpu_utilization{")
    for at, phase, values in scrapes:
        want = 100 * values["nv_gpu_utilization"]
        assert prom.value(query, at) == pytest.approx(want), (phase, at)
        assert prom.value(adapter, at) == pytest.approx(want), (phase, at)
    loaded = [100 * v["nv_gpu_utilization"] for _, phase, v in scrapes if phase == "load"]
    idle = [100 * v["nv_gpu_utilization"] for _, phase, v in scrapes if phase == "idle"]
    # what the recorded run shows: an autoscaler on gpuUtilization sees the load, and sees it end
    assert min(loaded[1:]) > 50 > max(idle), (loaded, idle)
