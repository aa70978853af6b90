"""Issue 16: administrative APIs behind a key (real tritonserver), image currency, the NetworkPolicy and
the admin-key wiring of the rendered objects.
Here the tests on real components; the pure ones are in tests/unit/test_security.py."""

from __future__ import annotations

import json
import re
import shutil
import signal
import stat
import urllib.error
import urllib.request
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from component.test_serve_cli import _serve
from helpers import example
from tritonpipeline.client import TritonClient, read_key
from tritonpipeline.triton import security


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# --- the real tritonserver ----------------------------------------------------------------------------


@pytest.mark.tritonserver
def test_admin_apis_need_the_key_inference_does_not(shared_pipeline):
    server = shared_pipeline(example("diamond"))
    base = f"http://{server.http_url}"
    key = server.admin_key
    assert key and key not in repr(server)
    with_key, wrong = server.admin_headers(), security.headers("0" * 64)

    # logging (CVE-2024-0087 went through it): refused without the key or with a wrong one
    assert post(f"{base}/v2/logging", {"log_verbose_level": 1})[0] == 403
    assert post(f"{base}/v2/logging", {"log_verbose_level": 1}, wrong)[0] == 403
    code, body = post(f"{base}/v2/logging", {"log_verbose_level": 0}, with_key)
    assert code == 200 and json.loads(body)["log_verbose_level"] == 0

    # shared-memory registration of a real region (CVE-2024-0088, CVE-2025-23319 went through it)
    region = shared_memory.SharedMemory(create=True, size=64)
    try:
        reg = {"key": f"/{region.name}", "offset": 0, "byte_size": 64}
        url = f"{base}/v2/systemsharedmemory/region/tp_region/register"
        assert post(url, reg)[0] == 403
        assert post(url, reg, with_key)[0] == 200
        status = urllib.request.Request(f"{base}/v2/systemsharedmemory/status", headers=with_key)
        with urllib.request.urlopen(status, timeout=10) as resp:
            assert [r["name"] for r in json.loads(resp.read())] == ["tp_region"]
        assert post(f"{base}/v2/systemsharedmemory/region/tp_region/unregister", {}, with_key)[0] == 200
    finally:
        region.close()
        region.unlink()

    # the other restricted groups, each refused without the key
    for path, body in [
        ("/v2/repository/index", {}),
        ("/v2/repository/models/diamond/load", {}),
        ("/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]}),
    ]:
        assert post(f"{base}{path}", body)[0] == 403, path
    for path in ("/v2/models/diamond/config", "/v2/models/stats"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}{path}", timeout=10)
        assert err.value.code == 403, path

    # inference, health and metadata stay open, on both protocols
    image = np.arange(8, dtype=np.float32).reshape(2, 4)
    for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
        with TritonClient(url, protocol=protocol) as client:
            result = client.infer("diamond", [client.input("IMAGE", image)])
            assert result.as_numpy("RESULT").shape == (2, 4)
            assert client.raw.is_server_ready() and client.raw.get_model_metadata("diamond")
    assert key not in server.logs()


@pytest.mark.tritonserver
def test_grpc_admin_calls_need_the_key_and_the_client_helper_sends_it(shared_pipeline):
    server = shared_pipeline(example("diamond"))
    raw = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match="restricted"):
        raw.update_log_settings({"log_verbose_level": 0})
    with pytest.raises(InferenceServerException, match="restricted"):
        raw.get_system_shared_memory_status()
    with pytest.raises(ValueError, match="admin_key"):
        _ = TritonClient(server.grpc_url).admin
    for protocol, url in (("grpc", server.grpc_url), ("http", server.http_url)):
        with TritonClient(url, protocol=protocol, admin_key=server.admin_key) as client:
            settings = client.admin.update_log_settings({"log_verbose_level": 0})
            assert settings is not None
            assert client.admin.get_model_repository_index()
            assert server.admin_key not in repr(client.admin)


@pytest.mark.tritonserver
@pytest.mark.cli
def test_serve_restricts_and_writes_the_key_to_a_private_file():
    proc, http, lines = _serve(["--keep"])
    try:
        text = "".join(lines)
        match = re.search(r"need the key in (\S+) \(mode 0600\)", text)
        assert match, text
        path = Path(match.group(1))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        key = read_key(path)
        assert len(key) == 64 and key not in text
        url = f"http://127.0.0.1:{http}/v2/logging"
        assert post(url, {"log_verbose_level": 0})[0] == 403
        assert post(url, {"log_verbose_level": 0}, security.headers(key))[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[0]
    assert key not in rest
    logged = re.search(r"starting tritonserver \(log: (\S+)\)", text)
    assert logged, text
    log = Path(logged.group(1))
    assert key not in log.read_text()
    log.unlink()  # serve's own log and temporary work directory (kept by --keep)
    shutil.rmtree(path.parent)
