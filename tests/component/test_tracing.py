"""spec.server.tracing: Triton's request tracing through the spec (issue 55, point 5). The renderer
(compiler/tracing.py) writes Triton's own `--trace-config` flags into the cluster's Triton container and
`tritonpipeline serve`'s tritonserver; the spec refuses what Triton would not do, with field paths; the
collector's URL is an address the author chooses, reviewed like a KEDA trigger's (issue 54); and a real
tritonserver started by `serve` traces an inference: into Triton's trace file (mode triton), and as
spans POSTed to a loopback OTLP/HTTP receiver (mode opentelemetry).
Here the tests on real components; the pure ones are in tests/unit/test_tracing.py."""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from component.test_serve_cli import infer_once
from helpers import ROOT

# ------------------------------------------------------------------------- a real tritonserver


class OtlpReceiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver on loopback: keeps every POST to /v1/traces (its content type and body)."""

    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/traces":
            type(self).received.append((self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def serve(file: Path, *extra: str) -> tuple[subprocess.Popen[str], int, list[str]]:
    from component.test_serve_cli import _serve

    return _serve(list(extra), file=file)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    return rest


def pipeline_file(tmp_path: Path, tracing_spec: dict[str, Any]) -> Path:
    """examples/fanout.yaml with `tracing`, beside the example's models."""
    d = yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text())
    d["spec"]["modelRepository"]["uri"] = str(ROOT / "model_repository")
    d["spec"]["server"]["tracing"] = tracing_spec
    path = tmp_path / "fanout.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


@pytest.mark.tritonserver
@pytest.mark.cli
def test_serve_exports_an_inferences_spans_to_an_otlp_receiver(tmp_path: Path) -> None:
    OtlpReceiver.received = []
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OtlpReceiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    spec = {"url": url, "rate": 1, "resource": {"deployment.environment": "test"}}
    try:
        proc, port, lines = serve(pipeline_file(tmp_path, spec))
        try:
            assert f"tracing: OpenTelemetry spans to {url} (TIMESTAMPS, every request)" in "".join(lines)
            infer_once(port)
        finally:
            rest = stop(proc)  # tritonserver exports what its batch span processor holds as it stops
        deadline = time.monotonic() + 20
        while not OtlpReceiver.received and time.monotonic() < deadline:
            time.sleep(0.2)
        assert OtlpReceiver.received, f"no span reached the receiver\n{''.join(lines)}{rest}"
        kinds = {content for content, _ in OtlpReceiver.received}
        assert kinds <= {"application/x-protobuf", "application/json"}, kinds
        payload = b"".join(body for _, body in OtlpReceiver.received)
        # the resource attributes and the models the request ran through, as the protobuf's strings
        for word in (b"service.name", b"vision", b"deployment.environment", b"test", b"extract"):
            assert word in payload, word
    finally:
        receiver.shutdown()
        receiver.server_close()


@pytest.mark.tritonserver
@pytest.mark.cli
def test_serve_writes_an_inferences_trace_to_tritons_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "out" / "vision-trace.json"
    trace.parent.mkdir()
    spec = {"mode": "triton", "rate": 1, "logFrequency": 1}
    proc, port, lines = serve(pipeline_file(tmp_path, spec), "--trace-file", str(trace))
    try:
        assert "tracing: Triton's trace file" in "".join(lines) and "(TIMESTAMPS, every request)" in "".join(
            lines
        )
        infer_once(port)
    finally:
        stop(proc)
    written = sorted(trace.parent.iterdir())  # logFrequency 1: one file per trace, FILE.0, FILE.1...
    assert written and all(f.name.startswith("vision-trace.json.") for f in written), written
    traces = [entry for f in written for entry in json.loads(f.read_text() or "[]")]
    models = {t.get("model_name") for t in traces}
    assert {"vision", "extractor", "head_b", "head_c", "vision__extract__FEATS_A__router"} <= models, models
    stamps = {s["name"] for t in traces for s in t.get("timestamps", [])}
    assert {"REQUEST_START", "QUEUE_START", "COMPUTE_START", "REQUEST_END"} <= stamps, stamps
