"""Pure renderers of session-affinity routing and autoscaling (render/routing_objects.py,
render/autoscaling_objects.py), the client helper's header, and the chart's generated prometheus-adapter
rules. Here the tests on real components; the pure ones are in tests/unit/test_routing_autoscaling.py."""

from __future__ import annotations

import pytest

from helpers import example
from support.routing_autoscaling import children, doc
from tritonpipeline.render import autoscaling_objects
from tritonpipeline.settings import Settings
from tritonpipeline.triton.addresses import loopback, url_host


@pytest.mark.tritonserver
@pytest.mark.parametrize("ip_family", ["IPv4", "IPv6"])
def test_drain_hooks_fail_readiness_on_a_real_tritonserver(serve_pipeline, tmp_path, ip_family):
    """The exact preStop and readiness commands of a stateful pod, run with sh and curl against a real
    tritonserver (its port and a temporary drain directory substituted): ready until preStop ran. On an
    IPv6 pod network the probe asks [::1], where Triton then listens (triton/addresses.py)."""
    import shutil
    import subprocess

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (the Triton image has it; here: apt-get install curl)")
    _, kids = children(doc(), Settings(ip_family=ip_family))
    (c,) = kids.deployment["spec"]["template"]["spec"]["containers"]
    host = loopback(ip_family)
    server = serve_pipeline(example("streaming"), host)
    drain_dir = str(tmp_path / "run")
    pod_url = f"{url_host(host)}:8000"
    assert pod_url in c["readinessProbe"]["exec"]["command"][2]

    def local(command: list[str]) -> list[str]:
        script = command[2].replace(autoscaling_objects.DRAIN_DIR, drain_dir)
        script = script.replace(pod_url, server.http_url).replace("sleep ", "sleep 0 && : ")
        return [*command[:2], script]

    readiness = local(c["readinessProbe"]["exec"]["command"])
    assert subprocess.run(readiness, timeout=10).returncode == 0  # serving: ready
    pre_stop = local(c["lifecycle"]["preStop"]["exec"]["command"])
    assert subprocess.run(pre_stop, timeout=10).returncode == 0
    assert subprocess.run(readiness, timeout=10).returncode != 0  # draining: not ready any more
    assert server.process is not None and server.process.poll() is None  # and still serving
    assert server._get("/v2/health/ready")[0] == 200
