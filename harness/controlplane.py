"""A real Kubernetes control plane for tests: upstream etcd + kube-apiserver on loopback.

The binaries are built from Go modules (harness/controlplane_binaries.py) and cached outside the repo.
Nothing here imitates the API server; this module only generates certificates (harness/pki.py), starts
the two processes, waits for /readyz and hands out clients. From the command line (`make cluster-up`):
harness/controlplane_cli.py.

    from harness.controlplane import ControlPlane
    from harness.controlplane_binaries import ensure_binaries
    with ControlPlane(tmpdir, ensure_binaries()) as cp:
        v1 = kubernetes.client.CoreV1Api(cp.api_client())
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tritonpipeline.local.tritonserver import free_ports

from .controlplane_binaries import Binaries, ControlPlaneError, ensure_binaries
from .pki import OpensslError, client_subject, ec_key, issue, make_ca, openssl
from .process import start_and_wait

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM the child when the process that started it dies (no orphaned servers)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, state under `workdir`.

    RBAC and Node authorization, x509 client-certificate authentication against a generated CA, a
    service-account signing key. The ServiceAccount admission plugin is off: without a
    controller-manager no `default` ServiceAccount is ever created, and Pods would be refused.
    No controller-manager, scheduler or kubelet run: objects are stored, nothing reconciles them."""

    def __init__(
        self,
        workdir: Path | str,
        binaries: Binaries | None = None,
        *,
        extra_apiserver_args: tuple[str, ...] = (),
        detach: bool = False,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.binaries = binaries or ensure_binaries()
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        # detach: the servers outlive this Python process (`up`); otherwise they get SIGTERM with it
        self.detach = detach
        self.pki = self.workdir / "pki"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.etcd_log = self.workdir / "etcd.log"
        self.apiserver_log = self.workdir / "kube-apiserver.log"
        self.etcd_port = self.etcd_peer_port = self.port = 0
        self.url = ""
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._users: dict[tuple[str, tuple[str, ...]], Path] = {}
        self.startup_seconds: float | None = None
        self._readyz = "no answer yet"  # what /readyz last answered during start-up

    @property
    def version(self) -> str:
        return self.binaries.kubernetes_version

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> ControlPlane:
        """Start etcd and kube-apiserver and wait for /readyz. A second start() after stop() reuses
        the ports, certificates and etcd data: same URL, same kubeconfig, objects kept."""
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_pki()
        fresh = self.port == 0
        for attempt in range(3):
            if fresh:
                self.etcd_port, self.etcd_peer_port, self.port = free_ports(3)
                shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
            self.url = f"https://127.0.0.1:{self.port}"
            try:
                self._readyz = "no answer yet"
                etcd = self._etcd = self._spawn("etcd", self._etcd_cmd(), self.etcd_log, lambda: True, 0)
                self.kubeconfig = self.write_kubeconfig(self.kubeconfig, "admin", ("system:masters",))
                self._apiserver = self._spawn(
                    "kube-apiserver",
                    self._apiserver_cmd(),
                    self.apiserver_log,
                    self._ready,
                    t0 + timeout,
                    etcd,
                )
                break
            except ControlPlaneError as err:
                self.stop()
                # another process took a port between picking and binding it: pick new ones
                if not (fresh and attempt < 2 and "address already in use" in str(err)):
                    raise
            except BaseException:
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - t0
        self._write_state()
        return self

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM the apiserver then etcd (SIGKILL after `timeout`). Safe to call twice."""
        for proc in (self._apiserver, self._etcd):
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The kube-apiserver stopped (SIGSTOP, by its PID) for the block and continued after it: its port
        accepts connections that get no answer, as a hung apiserver's does; etcd runs on."""
        proc = self._apiserver
        assert proc is not None and proc.poll() is None, "the apiserver is not running"
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(proc.pid, signal.SIGCONT)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(
        self,
        name: str,
        cmd: list[str],
        log: Path,
        ready: Callable[[], object],
        deadline: float,
        etcd: subprocess.Popen[bytes] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start one server (in a session of its own: Ctrl-C in a terminal goes to us, not to the
        servers) and wait until `ready()`, while `etcd` (the apiserver's) keeps running."""
        return start_and_wait(
            name,
            cmd,
            ready,
            log=log,
            timeout=max(deadline - time.monotonic(), 0),
            tail=lambda: f"last answer: {self._readyz}\n{self.log_tails()}",
            interval=0.2,
            error=ControlPlaneError,
            alongside={"etcd": etcd} if etcd is not None else None,
            append=True,
            cwd=self.workdir,
            preexec_fn=None if self.detach else _die_with_parent,
        )

    def _etcd_cmd(self) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self.binaries.etcd),
            "--name=tritonpipeline",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=tritonpipeline={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # throwaway test data: no fsync, much faster on slow disks
            "--log-level=warn",
        ]

    def _apiserver_cmd(self) -> list[str]:
        pki = self.pki
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # needs the `default` ServiceAccount that only kube-controller-manager creates
            "--disable-admission-plugins=ServiceAccount",
            # the loopback advertise address is not a valid Endpoints IP; nothing in-cluster needs it
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # on by default in OpenShift: setting blockOwnerDeletion needs update on the owner's finalizers
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--profiling=false",
            *self.extra_apiserver_args,
        ]

    def _write_pki(self) -> None:
        try:
            self._write_new_pki()
        except OpensslError as err:
            raise ControlPlaneError(str(err)) from None

    def _write_new_pki(self) -> None:
        if (self.pki / "apiserver.crt").exists():
            return  # restart on the same workdir keeps its CA: old kubeconfigs stay valid
        tmp = self.workdir / "pki.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        make_ca(tmp)
        sans = ["IP:127.0.0.1", f"IP:{SERVICE_IP}", "DNS:localhost", "DNS:kubernetes"]
        sans += [
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
        issue(
            tmp,
            "apiserver",
            "/CN=kube-apiserver",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={','.join(sans)}\n",
        )
        ec_key(tmp / "sa.key")
        openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=tmp)
        os.rename(tmp, self.pki)

    # -- clients --------------------------------------------------------------------------------------

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """A client certificate (crt, key) for `user` in `groups`, signed by this cluster's CA."""
        name = "user-" + "-".join(
            "".join(c if c.isalnum() else "_" for c in part) for part in (user, *groups)
        )
        crt, key = self.pki / f"{name}.crt", self.pki / f"{name}.key"
        if crt.exists() and key.exists():
            return crt, key
        try:
            return issue(
                self.pki,
                name,
                client_subject(user, tuple(groups)),
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
            )
        except OpensslError as err:
            raise ControlPlaneError(str(err)) from None

    def write_kubeconfig(self, path: Path, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A self-contained kubeconfig (certificates embedded) for `user` in `groups`."""
        crt, key = self.client_cert(user, groups)

        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tritonpipeline-e2e",
                    "cluster": {"server": self.url, "certificate-authority-data": b64(self.pki / "ca.crt")},
                }
            ],
            "users": [
                {"name": user, "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)}}
            ],
            "contexts": [{"name": user, "context": {"cluster": "tritonpipeline-e2e", "user": user}}],
            "current-context": user,
        }
        path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
        path.chmod(0o600)
        return path

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """Kubeconfig for another identity (cached per user and groups)."""
        key = (user, tuple(groups))
        if key not in self._users:
            safe = "".join(c if c.isalnum() else "_" for c in "-".join((user, *groups)))
            self._users[key] = self.write_kubeconfig(self.workdir / f"kubeconfig-{safe}", user, tuple(groups))
        return self._users[key]

    def api_client(self, user: str = "admin", groups: tuple[str, ...] | None = None) -> Any:
        """A new kubernetes.client.ApiClient. Default: the admin identity (group system:masters)."""
        from kubernetes import client, config

        if user == "admin" and groups is None:
            path = self.kubeconfig
        else:
            path = self.user_kubeconfig(user, tuple(groups or ()))
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
        return client.ApiClient(configuration)

    def ssl_context(
        self, user: str = "admin", groups: tuple[str, ...] = ("system:masters",)
    ) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        crt, key = self.client_cert(user, groups)
        ctx.load_cert_chain(str(crt), str(key))
        return ctx

    def get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        """GET `path` as admin; returns (status, body)."""
        req = urllib.request.Request(self.url + path)
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    # -- readiness and diagnostics --------------------------------------------------------------------

    def _ready(self) -> bool:
        """/readyz answers 200; what it answered otherwise is kept for the error (`_readyz`)."""
        try:
            with urllib.request.urlopen(self.url + "/readyz", context=self.ssl_context(), timeout=2) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError as err:
            self._readyz = f"/readyz {err.code}: {err.read().decode(errors='replace')[-2000:]}"
        except (OSError, ssl.SSLError) as err:
            self._readyz = f"/readyz: {err}"
        return False

    def log_tails(self, lines: int = 60) -> str:
        parts = []
        for log in (self.etcd_log, self.apiserver_log):
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else ["(no log)"]
            parts.append(f"===== {log} (last {lines} lines) =====\n" + "\n".join(text))
        return "\n".join(parts)

    def pids(self) -> dict[str, int]:
        return {
            name: proc.pid
            for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver))
            if proc is not None
        }

    def _write_state(self) -> None:
        state = {
            "url": self.url,
            "kubeconfig": str(self.kubeconfig),
            "version": self.version,
            "pids": self.pids(),
            "binaries": {
                "kube-apiserver": str(self.binaries.kube_apiserver),
                "etcd": str(self.binaries.etcd),
            },
            "logs": {"etcd": str(self.etcd_log), "kube-apiserver": str(self.apiserver_log)},
        }
        (self.workdir / "state.json").write_text(json.dumps(state, indent=2) + "\n")
        for name, pid in self.pids().items():
            (self.workdir / f"{name}.pid").write_text(f"{pid}\n")
