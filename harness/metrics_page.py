"""A hostile pod's metrics port (issue 54): `HugePage` serves PAGE_BYTES of valid Prometheus text with no
Content-Length (read until the connection closes), counting what it managed to send. Used by
tests/component/test_tenants.py and bench/controlplane/tenants.py, on 127.0.0.1 only."""

from __future__ import annotations

import http.server
from typing import Any


class HugePage(http.server.BaseHTTPRequestHandler):
    PAGE_BYTES = 20 * 1024 * 1024
    sent: list[int] = []  # bytes sent per request

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        line = b'nv_inference_request_success{model="m%08d",version="1"} 1\n'
        chunk = b"".join(line % i for i in range(1000))
        sent = 0
        try:
            while sent < self.PAGE_BYTES:
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass
        self.sent.append(sent)

    def log_message(self, *args: Any) -> None:
        pass
