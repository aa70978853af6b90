"""Real CoreDNS (built from its Go module by e2e/build-gotool.sh, kubernetes plugin compiled in) as a
subprocess: the cluster DNS that answers a headless Service's name with the addresses of its ready
endpoints, read from a real kube-apiserver through a kubeconfig.

The bind address and the kubeconfig are parameters: on the host it listens on 127.0.0.1; in a cluster's
network (a kind node's), construct and start it (and query it) inside that network namespace
(`Cluster.network()`), so that the readiness checks run there too, with the cluster's kubeconfig.

    for obj in rbac_objects():                 # list/watch only, as user system:coredns
        apply_object(kube, obj)                # harness/kubeapi.py
    with CoreDNS(tmp, cp.user_kubeconfig(USER)) as dns:
        dns.resolve("vision-headless.ml.svc.cluster.local")   # ['10.244.0.12', ...], ready endpoints only
        haproxy_resolver = dns.address                          # "127.0.0.1:PORT"
"""

from __future__ import annotations

import ipaddress
import random
import re
import socket
import struct
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tritonpipeline.local.tritonserver import free_port

from .gotools import ensure_tool, missing_tool
from .process import end, start_and_wait

CLUSTER_DOMAIN = "cluster.local"
# characters a path may have to go into the Corefile unquoted (Caddyfile tokens split on blanks, quotes
# and braces)
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@=,-]+$")
# a DNS name of a Service: dot-separated RFC 1123 labels
_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


# the identity it reads the apiserver as, and the only access its kubernetes plugin needs (upstream's
# system:coredns ClusterRole less pods and endpoints; without namespaces it logs `forbidden` and never
# becomes ready)
USER = "system:coredns"
READ_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
]


def rbac_objects(user: str = USER) -> list[dict[str, Any]]:
    """A ClusterRole with READ_RULES and its binding to `user`: apply them, then give CoreDNS a kubeconfig
    for `user` (e.g. ControlPlane.user_kubeconfig(USER))."""
    name = "tritonpipeline-e2e-coredns"
    role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": READ_RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return [role, binding]


def missing_coredns() -> str | None:
    """Why CoreDNS cannot run here, or None (exact, for a skip message)."""
    reason = missing_tool("coredns")
    if reason:
        return reason.replace("make helm", "e2e/build-gotool.sh coredns")
    return None


def checked_address(host: str) -> str:
    """`host` as an IP address literal (ValueError otherwise): what goes into generated configs."""
    return str(ipaddress.ip_address(host))


def checked_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port: expected an integer 1-65535, got {port!r}")
    return port


def checked_path(path: Path) -> str:
    text = str(Path(path).resolve())
    if not _SAFE_PATH.match(text):
        raise ValueError(f"path {text!r}: only letters, digits and _./+@=,- can go into a config unquoted")
    return text


def checked_dns_name(name: str) -> str:
    if not _DNS_NAME.match(name):
        raise ValueError(f"DNS name {name!r}: expected dot-separated RFC 1123 labels")
    return name


def service_fqdn(service: str, namespace: str, domain: str = CLUSTER_DOMAIN) -> str:
    """The cluster DNS name of a Service: <service>.<namespace>.svc.<domain>."""
    return checked_dns_name(f"{service}.{namespace}.svc.{domain}")


class CoreDNS:
    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        ttl: int = 1,
    ) -> None:
        """`host`:`port` is where it answers DNS (UDP and TCP; a free port by default); `ttl` the seconds
        its answers may be cached (0-3600); `kubeconfig` says which apiserver, as whom."""
        self.workdir = Path(workdir)
        self.kubeconfig = Path(kubeconfig)
        self.host = checked_address(host)
        self.port = checked_port(port if port is not None else free_port())
        self.ready_port = free_port()
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 <= ttl <= 3600:
            raise ValueError(f"ttl: expected an integer 0-3600 seconds, got {ttl!r}")
        self.ttl = ttl
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """host:port of its DNS service (what a resolver's `nameserver` line takes)."""
        return f"{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        """The ready plugin's endpoint: 200 once the kubernetes plugin has synced with the apiserver."""
        return f"http://{self.host}:{self.ready_port}/ready"

    @property
    def log_file(self) -> Path:
        return self.workdir / "coredns.log"

    def corefile(self) -> str:
        return (
            f"{CLUSTER_DOMAIN}:{self.port} {{\n"
            f"    bind {self.host}\n"
            "    errors\n"
            "    log\n"
            f"    ready {self.host}:{self.ready_port}\n"
            f"    kubernetes {CLUSTER_DOMAIN} {{\n"
            f"        kubeconfig {checked_path(self.kubeconfig)}\n"
            f"        ttl {self.ttl}\n"
            "    }\n"
            "}\n"
        )

    def start(self, timeout: float = 30.0) -> CoreDNS:
        binary = ensure_tool("coredns")  # built first when missing (about a minute to five)
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "Corefile"
        conf.write_text(self.corefile())
        self.proc = start_and_wait(
            "coredns",
            [str(binary), "-conf", str(conf)],
            lambda: self._ready() and self._answers(),
            log=self.log_file,
            timeout=timeout,
            tail=self.logs,
            cwd=self.workdir,
        )
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _answers(self) -> bool:
        """A DNS query is answered (the ready plugin may say ready before the first one is)."""
        try:
            query_a(self.host, self.port, f"kubernetes.default.svc.{CLUSTER_DOMAIN}", timeout=0.5)
        except OSError:
            return False
        return True

    def resolve(self, name: str, timeout: float = 2.0) -> list[str]:
        """The A records it answers for `name`, sorted ([] for NXDOMAIN or no address)."""
        return query_a(self.host, self.port, name, timeout)

    def logs(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""

    def stop(self, timeout: float = 10.0) -> None:
        end(self.proc, timeout)

    def __enter__(self) -> CoreDNS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def query_a(host: str, port: int, name: str, timeout: float = 2.0) -> list[str]:
    """One DNS query (UDP, type A, recursion not asked) to host:port; the answer's addresses, sorted."""
    qid = random.randrange(1 << 16)
    question = b"".join(bytes([len(label)]) + label.encode() for label in checked_dns_name(name).split("."))
    packet = struct.pack("!HHHHHH", qid, 0, 1, 0, 0, 0) + question + b"\0" + struct.pack("!HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, (host, port))
        reply = s.recv(4096)
    rid, flags, qdcount, ancount = struct.unpack("!HHHH", reply[:8])
    if rid != qid:
        raise RuntimeError(f"DNS reply id {rid} does not match query id {qid}")
    rcode = flags & 0xF
    if rcode not in (0, 3):  # NOERROR, NXDOMAIN
        raise RuntimeError(f"DNS query for {name} answered rcode {rcode}")
    at = 12
    for _ in range(qdcount):
        at = _skip_name(reply, at) + 4
    found = []
    for _ in range(ancount):
        at = _skip_name(reply, at)
        rtype, _cls, _ttl, length = struct.unpack("!HHIH", reply[at : at + 10])
        at += 10
        if rtype == 1 and length == 4:
            found.append(socket.inet_ntoa(reply[at : at + 4]))
        at += length
    return sorted(found, key=ipaddress.ip_address)


def _skip_name(message: bytes, at: int) -> int:
    """The offset after the (possibly compressed) name at `at`."""
    while True:
        length = message[at]
        if length & 0xC0 == 0xC0:
            return at + 2
        if length == 0:
            return at + 1
        at += 1 + length
