"""Real HAProxy (the Debian package) in front of tritonservers found through the cluster DNS: the stand-in
for the ingress-nginx consistent-hash setup the operator renders for routing.sessionAffinity Header
(a headless Service `<name>-headless` plus `upstream-hash-by` on the sequence header).

Its servers are the A records of the headless Service's name, asked every second from CoreDNS
(harness/coredns.py), which serves the ready endpoints of the Service's EndpointSlices; `server-template`
keeps `slots` server slots and fills them from each answer, so a pod that stops being ready leaves the
rotation within a couple of seconds and one that becomes ready joins it.

Two backend flavours:
  hash   `balance hdr(<header>)` + `hash-type consistent`: what ingress-nginx's upstream-hash-by does. A
         key's server is a function of the set of servers: when the set changes, some live keys move.
         HAProxy 2.6 places servers on the ring by slot (server id), not address: an address that
         fills a freed slot takes that slot's keys (a pod marked ready again got exactly its old keys
         back in tests/component/test_haproxy_dns.py); ingress-nginx keys its ring by address instead.
  stick  `balance roundrobin` + a stick table keyed on the header: a key stays on the server it first
         reached for as long as that server is in the set (only the keys of a leaving server move).

    with HAProxy(tmp, dns.address, service_fqdn("vision-headless", "ml")) as lb:
        client = AsyncTritonClient(lb.http_url, protocol="http")
        lb.servers()          # per server slot: address, status, requests
        lb.served_by_key()    # header value -> set of server addresses that served it (from its log)

Every value that goes into the generated configuration is checked first (addresses, ports, integers, DNS
names, a header name, a path), never pasted in as given.
"""

from __future__ import annotations

import csv
import io
import re
import socket
import subprocess
from pathlib import Path
from typing import Literal

from tritonpipeline.client import DEFAULT_HEADER
from tritonpipeline.local.tritonserver import free_port

from .coredns import checked_address, checked_dns_name, checked_path, checked_port
from .process import end, missing_system_binary, start_and_wait, system_binary
from .wait import wait_for

Flavour = Literal["hash", "stick"]
FLAVOURS: tuple[Flavour, ...] = ("hash", "stick")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
_UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the trailing NUL


class HAProxyUnavailable(RuntimeError):
    """haproxy is not installed: tests skip with this message."""


def haproxy_binary() -> str | None:
    return system_binary("haproxy", "/usr/sbin/haproxy")


def missing_haproxy() -> str | None:
    """Why haproxy cannot run here (the exact skip reason), or None."""
    return missing_system_binary("haproxy", "/usr/sbin/haproxy", "haproxy")


def checked_header(name: str) -> str:
    """An HTTP header name (letters, digits, dashes), lower-cased as HTTP/2 sends it."""
    if not _HEADER_NAME.match(name):
        raise ValueError(f"header {name!r}: expected letters, digits and dashes")
    return name.lower()


def _checked_int(what: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what}: expected an integer {low}-{high}, got {value!r}")
    return value


class HAProxy:
    def __init__(
        self,
        workdir: Path,
        resolver: str,
        fqdn: str,
        *,
        flavour: Flavour = "hash",
        header: str = DEFAULT_HEADER,
        slots: int = 8,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        backend_http_port: int = 8000,
        backend_grpc_port: int | None = 8001,
    ) -> None:
        """`resolver`: CoreDNS's host:port; `fqdn`: the headless Service's name (service_fqdn()); `slots`:
        the most servers the name may resolve to; `host`:`http_port`/`grpc_port`: where it listens (free
        ports by default); `backend_*_port`: the pods' HTTP and gRPC ports (None: no gRPC frontend). In a
        cluster's network, start it inside that namespace (`Cluster.network()`; the stats socket is a file,
        so servers() and served_by_key() work from anywhere)."""
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour: expected one of {', '.join(FLAVOURS)}, got {flavour!r}")
        resolver_host, _, resolver_port = resolver.rpartition(":")
        if not resolver_port.isdigit():
            raise ValueError(f"resolver: expected host:port, got {resolver!r}")
        self.workdir = Path(workdir)
        self.resolver = f"{checked_address(resolver_host)}:{checked_port(int(resolver_port))}"
        self.fqdn = checked_dns_name(fqdn)
        self.flavour: Flavour = flavour
        self.header = checked_header(header)
        self.slots = _checked_int("slots", slots, 1, 1000)
        self.host = checked_address(host)
        self.http_port = checked_port(http_port if http_port is not None else free_port())
        self.backend_http_port = checked_port(backend_http_port)
        self.backend_grpc_port = None if backend_grpc_port is None else checked_port(backend_grpc_port)
        self.grpc_port: int | None = None
        if self.backend_grpc_port is not None:
            self.grpc_port = checked_port(grpc_port if grpc_port is not None else free_port())
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        """host:port of the HTTP frontend."""
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC (h2c) frontend."""
        if self.grpc_port is None:
            raise RuntimeError("no gRPC frontend: backend_grpc_port is None")
        return f"{self.host}:{self.grpc_port}"

    @property
    def stats_socket(self) -> Path:
        return self.workdir / "stats.sock"

    @property
    def log_file(self) -> Path:
        """Its stderr: startup messages, then one line per request:
        `<header value> <backend> <server ip:port> <status>`."""
        return self.workdir / "haproxy.log"

    def _balance(self) -> str:
        if self.flavour == "hash":
            # HAProxy's default function for consistent hashing, spelled out: avalanche spreads consecutive
            # sequence ids; a request without the header is balanced round robin
            return f"    balance hdr({self.header})\n    hash-type consistent sdbm avalanche\n"
        return (
            "    balance roundrobin\n"
            f"    stick-table type string len 128 size {self.slots * 100_000} expire 1h\n"
            f"    stick on req.hdr({self.header})\n"
        )

    def _backend(self, name: str, port: int, proto: str) -> str:
        return (
            f"backend {name}\n"
            f"{self._balance()}"
            f"    server-template pod {self.slots} {self.fqdn}:{port} resolvers cluster init-addr none "
            f"resolve-prefer ipv4{proto}\n"
        )

    def config(self) -> str:
        socket_path = checked_path(self.stats_socket)
        if len(socket_path) > _UNIX_PATH_MAX:
            raise ValueError(f"stats socket path {socket_path!r} is longer than {_UNIX_PATH_MAX} bytes")
        grpc = ""
        if self.grpc_port is not None and self.backend_grpc_port is not None:
            grpc = (
                "frontend grpc_in\n"
                f"    bind {self.host}:{self.grpc_port} proto h2\n"
                f"    http-request capture req.hdr({self.header}) len 128\n"
                "    default_backend triton_grpc\n"
                f"{self._backend('triton_grpc', self.backend_grpc_port, ' proto h2')}"
            )
        return (
            "global\n"
            "    log stderr format raw local0 info\n"
            f"    stats socket {socket_path} mode 600 level admin\n"
            "    maxconn 8192\n"
            "    hard-stop-after 5s\n"
            "defaults\n"
            "    mode http\n"
            "    log global\n"
            '    log-format "%[capture.req.hdr(0)] %b %si:%sp %ST"\n'
            "    option http-keep-alive\n"
            "    timeout connect 2s\n"
            "    timeout client 300s\n"
            "    timeout server 300s\n"
            "    timeout http-keep-alive 300s\n"
            "    retries 0\n"
            "resolvers cluster\n"
            f"    nameserver coredns {self.resolver}\n"
            "    accepted_payload_size 8192\n"
            "    resolve_retries 2\n"
            "    timeout resolve 1s\n"
            "    timeout retry 1s\n"
            "    hold valid 1s\n"
            "    hold other 1s\n"
            "    hold refused 1s\n"
            "    hold nx 1s\n"
            "    hold timeout 1s\n"
            "    hold obsolete 0s\n"
            "frontend http_in\n"
            f"    bind {self.host}:{self.http_port}\n"
            f"    http-request capture req.hdr({self.header}) len 128\n"
            "    default_backend triton_http\n"
            f"{self._backend('triton_http', self.backend_http_port, '')}"
            f"{grpc}"
        )

    def start(self, timeout: float = 20.0) -> HAProxy:
        binary = haproxy_binary()
        if binary is None:
            raise HAProxyUnavailable(missing_haproxy() or "haproxy missing")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "haproxy.cfg"
        conf.write_text(self.config())
        check = subprocess.run([binary, "-c", "-f", str(conf)], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(
                f"haproxy -c refused the configuration:\n{check.stdout}{check.stderr}\n{self.config()}"
            )
        self.proc = start_and_wait(  # -db: foreground, no daemon; ended by its PID
            "haproxy",
            [binary, "-db", "-f", str(conf)],
            lambda: self.stats_socket.exists() and self._stats_answers(),
            log=self.log_file,
            timeout=timeout,
            tail=self.logs,
            interval=0.05,
            not_ready="did not start",
        )
        return self

    def command(self, line: str) -> str:
        """One command on the stats socket (e.g. `show stat`), its answer."""
        if "\n" in line:
            raise ValueError("one command, one line")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.stats_socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def _stats_answers(self) -> bool:
        try:
            return "pxname" in self.command("show stat")
        except OSError:
            return False

    def servers(self, backend: str = "triton_http") -> list[dict[str, str]]:
        """The backend's server slots from `show stat`: name, addr (ip:port, empty when unassigned), status
        (e.g. `no check` in rotation, `MAINT (resolution)` out), req_tot (HTTP requests sent to it)."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return [
            {
                "name": row["svname"],
                "addr": row.get("addr", ""),
                "status": row["status"],
                "req_tot": row["req_tot"],
            }
            for row in rows
            if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")
        ]

    def active_addresses(self, backend: str = "triton_http") -> set[str]:
        """The ip:port of the servers in rotation (resolved, not in maintenance, not down)."""
        return {
            s["addr"]
            for s in self.servers(backend)
            if s["addr"] and not s["status"].startswith(("MAINT", "DOWN"))
        }

    def wait_active(
        self, addresses: set[str], backend: str = "triton_http", timeout: float = 15.0
    ) -> set[str]:
        """Wait until the servers in rotation are exactly `addresses` (ip:port; empty: none); them."""
        wait_for(
            f"haproxy backend {backend} in rotation = {sorted(addresses)}",
            lambda: self.active_addresses(backend) == addresses,
            timeout=timeout,
            interval=0.1,
        )
        return set(addresses)

    def log_mark(self) -> int:
        """Where its log ends now: served_by_key(since=mark) then counts only the requests after it."""
        return self.log_file.stat().st_size if self.log_file.exists() else 0

    def served_by_key(self, backend: str = "triton_http", since: int = 0) -> dict[str, set[str]]:
        """From its log (from byte `since` on): header value -> the set of server addresses (ip:port) that
        served it."""
        seen: dict[str, set[str]] = {}
        if self.log_file.exists():
            with open(self.log_file, "rb") as log:
                log.seek(since)
                text = log.read().decode(errors="replace")
            for line in text.splitlines():
                parts = line.split(" ")
                if len(parts) == 4 and parts[1] == backend:
                    seen.setdefault(parts[0], set()).add(parts[2])
        return seen

    def logs(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""

    def stop(self, timeout: float = 10.0) -> None:
        end(self.proc, timeout)  # hard stop: closes every connection now

    def __enter__(self) -> HAProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
