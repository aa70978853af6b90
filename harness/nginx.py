"""Real nginx (the Debian package) as a load balancer in front of local tritonservers, run as a plain
subprocess with its own prefix, config, pid file, logs and temp directories (nothing under /etc or
/var is read or written).

`hash_by` is the key ingress-nginx hashes on for `nginx.ingress.kubernetes.io/upstream-hash-by`, e.g.
`$http_x_triton_sequence_id`. ingress-nginx implements that annotation with a consistent-hash balancer
in Lua; `hash KEY consistent;` (ketama) is nginx's own consistent hashing on the same key. With
`hash_by=None` the upstream is nginx's default round robin.

    with Nginx(tmp, ["127.0.0.1:8000", ...], ["127.0.0.1:8001", ...], "$http_x_triton_sequence_id") as lb:
        client = AsyncTritonClient(lb.http_url, protocol="http")
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tritonpipeline.local.tritonserver import free_port

from .process import end, missing_system_binary, start_and_wait, system_binary

# what the access log records per request, to see which replica served which sequence
LOG_FORMAT = "$http_x_triton_sequence_id $upstream_addr $status"


class NginxUnavailable(RuntimeError):
    """nginx is not installed: tests skip with this message."""


def nginx_binary() -> str | None:
    return system_binary("nginx", "/usr/sbin/nginx")


def missing_nginx() -> str | None:
    """Why nginx cannot run here (the exact skip reason), or None."""
    return missing_system_binary("nginx", "/usr/sbin/nginx", "nginx")


class Nginx:
    def __init__(
        self,
        workdir: Path,
        http_backends: Sequence[str],
        grpc_backends: Sequence[str] = (),
        hash_by: str | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.http_backends = list(http_backends)
        self.grpc_backends = list(grpc_backends)
        self.hash_by = hash_by
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def access_log(self) -> Path:
        return self.workdir / "access.log"

    @property
    def error_log(self) -> Path:
        return self.workdir / "error.log"

    def _upstream(self, name: str, backends: list[str]) -> str:
        balance = f"    hash {self.hash_by} consistent;\n" if self.hash_by else ""
        servers = "".join(f"    server {b} max_fails=0;\n" for b in backends)
        return f"  upstream {name} {{\n{balance}{servers}    keepalive 32;\n  }}\n"

    def config(self) -> str:
        w = self.workdir
        temp = "".join(
            f"  {kind}_temp_path {w / 'temp' / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        grpc = ""
        if self.grpc_backends:
            grpc = self._upstream("triton_grpc", self.grpc_backends) + (
                f"  server {{\n"
                f"    listen 127.0.0.1:{self.grpc_port} http2;\n"
                f"    http2_max_concurrent_streams 1024;\n"
                f"    location /inference.GRPCInferenceService {{\n"
                f"      grpc_pass grpc://triton_grpc;\n"
                f"      grpc_next_upstream off;\n"
                f"    }}\n"
                f"  }}\n"
            )
        return (
            "daemon off;\n"
            "master_process off;\n"
            f"pid {w / 'nginx.pid'};\n"
            f"error_log {self.error_log} warn;\n"
            "events { worker_connections 4096; }\n"
            "http {\n"
            f"  log_format affinity '{LOG_FORMAT}';\n"
            f"  access_log {self.access_log} affinity;\n"
            f"{temp}"
            "  client_max_body_size 64m;\n"
            f"{self._upstream('triton_http', self.http_backends)}"
            "  server {\n"
            f"    listen 127.0.0.1:{self.http_port};\n"
            "    location /v2 {\n"
            "      proxy_pass http://triton_http;\n"
            "      proxy_http_version 1.1;\n"
            '      proxy_set_header Connection "";\n'
            "      proxy_next_upstream off;\n"
            "    }\n"
            "  }\n"
            f"{grpc}"
            "}\n"
        )

    def start(self, timeout: float = 20.0) -> Nginx:
        binary = nginx_binary()
        if binary is None:
            raise NginxUnavailable(missing_nginx() or "nginx missing")
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.workdir / "temp" / kind).mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "nginx.conf"
        conf.write_text(self.config())
        args = [binary, "-e", str(self.error_log), "-p", str(self.workdir), "-c", str(conf)]
        check = subprocess.run([*args, "-t"], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"nginx -t refused the configuration:\n{check.stderr}\n{self.config()}")
        ports = [self.http_port, *([self.grpc_port] if self.grpc_backends else [])]
        self.proc = start_and_wait(
            "nginx",
            args,
            lambda: all(_listening(p) for p in ports),
            log=self.workdir / "stdout.log",
            timeout=timeout,
            tail=self.logs,
            interval=0.05,
            not_ready="did not listen",
        )
        return self

    def logs(self) -> str:
        parts = []
        for path in (self.error_log, self.workdir / "stdout.log"):
            if path.exists():
                parts.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def upstreams_by_key(self) -> dict[str, set[str]]:
        """From the access log: header value -> the set of replicas that served it."""
        seen: dict[str, set[str]] = {}
        if self.access_log.exists():
            for line in self.access_log.read_text().splitlines():
                key, _, rest = line.partition(" ")
                upstream = rest.rsplit(" ", 1)[0]
                seen.setdefault(key, set()).add(upstream)
        return seen

    def stop(self, timeout: float = 10.0) -> None:
        end(self.proc, timeout)  # fast shutdown

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
