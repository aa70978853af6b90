"""A real Kubernetes control plane for tests: upstream etcd + kube-apiserver on loopback.

The binaries are built from Go modules by e2e/build-controlplane.sh (see e2e/controlplane/) and
cached outside the repo. Nothing here imitates the API server; this module only generates
certificates, starts the two processes, waits for /readyz and hands out clients.

    from harness.controlplane import ControlPlane, ensure_binaries
    with ControlPlane(tmpdir, ensure_binaries()) as cp:
        v1 = kubernetes.client.CoreV1Api(cp.api_client())

Command line (used by `make cluster-up` / `make cluster-down`):

    python -m harness.controlplane up [--dir /tmp/tritonpipeline-cluster]
    python -m harness.controlplane down [--dir ...]
    python -m harness.controlplane status [--dir ...]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonpipeline.local.tritonserver import free_ports

from .gotools import find_go, go_env
from .paths import E2E, cache_root
from .process import start_and_wait

BUILD_SCRIPT = E2E / "build-controlplane.sh"
GO_MOD = E2E / "controlplane" / "kube-apiserver" / "go.mod"
ETCD_GO_MOD = E2E / "controlplane" / "etcd" / "go.mod"
# other releases what we ship is checked on (tests/component/test_kube_releases.py), each apiserver on the
# same etcd:
# the oldest the chart supports (Chart.yaml kubeVersion) and the newest
RELEASES = ("floor", "newest")
DEFAULT_STATE_DIR = Path("/tmp/tritonpipeline-cluster")
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or did not become ready."""


class ControlPlaneUnavailable(ControlPlaneError):
    """A prerequisite (Go to build, openssl for certificates) is missing on this machine."""


# ---------------------------------------------------------------------------------------------------
# binaries


def _module_version(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise ControlPlaneError(f"{go_mod} does not require {module}")


def kubernetes_version() -> str:
    """The k8s.io/kubernetes release the apiserver is built from (e2e/controlplane/kube-apiserver/go.mod)."""
    return _module_version(GO_MOD, "k8s.io/kubernetes")


def release_version(release: str) -> str:
    """The k8s.io/kubernetes release of one of RELEASES (e2e/controlplane/kube-apiserver-RELEASE/go.mod)."""
    if release not in RELEASES:
        raise ValueError(f"release {release!r}: expected one of {', '.join(RELEASES)}")
    return _module_version(E2E / "controlplane" / f"kube-apiserver-{release}" / "go.mod", "k8s.io/kubernetes")


def etcd_version() -> str:
    return _module_version(ETCD_GO_MOD, "go.etcd.io/etcd/server/v3")


def cache_dir() -> Path:
    """Same directory as `e2e/build-controlplane.sh --print-dir`."""
    return cache_root() / "controlplane" / kubernetes_version()


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    kubernetes_version: str
    etcd_version: str


def cached_binaries() -> Binaries | None:
    """The built binaries, or None when they are not built yet."""
    where = cache_dir()
    apiserver, etcd = where / "kube-apiserver", where / "etcd"
    if os.access(apiserver, os.X_OK) and os.access(etcd, os.X_OK):
        return Binaries(apiserver, etcd, kubernetes_version(), etcd_version())
    return None


def cached_release_binaries(release: str) -> Binaries | None:
    """The kube-apiserver of one of RELEASES with the same etcd, or None when either is not built yet."""
    main = cached_binaries()
    version = release_version(release)
    apiserver = cache_root() / "controlplane" / version / "kube-apiserver"
    if main is None or not os.access(apiserver, os.X_OK):
        return None
    return Binaries(apiserver, main.etcd, version, main.etcd_version)


def _cached(release: str | None) -> Binaries | None:
    return cached_release_binaries(release) if release else cached_binaries()


def missing_prerequisite(release: str | None = None) -> str | None:
    """Why the control plane cannot run here, or None. Exact, so a skip message says what to install."""
    if shutil.which("openssl") is None:
        return "openssl is not installed (needed to generate the control plane's certificates)"
    if _cached(release) is None and find_go() is None:
        version = release_version(release) if release else kubernetes_version()
        return (
            f"Go is not installed (no `go` on PATH or /usr/local/go/bin/go) and kube-apiserver "
            f"{version} / etcd {etcd_version()} are not built in {cache_root() / 'controlplane'}"
        )
    return None


def ensure_binaries(output: Any = None, *, release: str | None = None) -> Binaries:
    """Return the cached binaries, building them first with e2e/build-controlplane.sh when missing.
    Raises ControlPlaneUnavailable when Go or openssl is missing, ControlPlaneError when the build fails.
    `output`: where the build's progress goes (a file object; default: this process's stdout).
    `release`: the kube-apiserver of that one of RELEASES instead, on the same etcd (the script builds every
    release then; without one, only etcd and the suite's kube-apiserver)."""
    reason = missing_prerequisite(release)
    if reason:
        raise ControlPlaneUnavailable(reason)
    found = _cached(release)
    if found:
        return found
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *(() if release else ("--without-releases",))],
        env=go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    out = output if output is not None else sys.stdout
    out.write(proc.stdout)
    out.flush()
    found = _cached(release)
    if proc.returncode != 0 or found is None:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{tail}")
    return found


# ---------------------------------------------------------------------------------------------------
# certificates (openssl CLI)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


def _ec_key(path: Path) -> None:
    ec = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    _openssl("genpkey", *ec, "-out", str(path), cwd=path.parent)
    path.chmod(0o600)


def _make_ca(pki: Path) -> None:
    _ec_key(pki / "ca.key")
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", "3650", "-subj",
        "/CN=tritonpipeline-e2e-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki,
    )  # fmt: skip


def _issue(pki: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    """Sign <name>.crt/<name>.key with the CA. `extensions`: openssl v3 extension lines."""
    key, csr, crt, ext = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    _ec_key(key)
    _openssl("req", "-new", "-key", key.name, "-out", csr.name, "-subj", subject, cwd=pki)
    ext.write_text(extensions)
    _openssl(
        "x509", "-req", "-in", csr.name, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", crt.name, "-days", "365", "-extfile", ext.name, cwd=pki,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
    return crt, key


def _client_subject(user: str, groups: tuple[str, ...]) -> str:
    # Kubernetes maps CN to the user name and each O to a group.
    for part in (user, *groups):
        if not part or any(c in part for c in "/=+,\\"):
            raise ValueError(f"unsupported character in certificate subject part {part!r}")
    return "".join(f"/O={g}" for g in groups) + f"/CN={user}"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM the child when the process that started it dies (no orphaned servers)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# ---------------------------------------------------------------------------------------------------
# the control plane


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
        if (self.pki / "apiserver.crt").exists():
            return  # restart on the same workdir keeps its CA: old kubeconfigs stay valid
        tmp = self.workdir / "pki.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        _make_ca(tmp)
        sans = ["IP:127.0.0.1", f"IP:{SERVICE_IP}", "DNS:localhost", "DNS:kubernetes"]
        sans += [
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
        _issue(
            tmp,
            "apiserver",
            "/CN=kube-apiserver",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={','.join(sans)}\n",
        )
        _ec_key(tmp / "sa.key")
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=tmp)
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
        return _issue(
            self.pki,
            name,
            _client_subject(user, tuple(groups)),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        )

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


# ---------------------------------------------------------------------------------------------------
# command line: up / down / status


def _pid_alive(pid: int, binary: str) -> bool:
    """True when `pid` runs `binary` (not a recycled pid of something else)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return Path(exe.removesuffix(" (deleted)")).name == Path(binary).name


def _read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _running(state_dir: Path) -> dict[str, int]:
    state = _read_state(state_dir) or {}
    return {
        name: pid
        for name, pid in state.get("pids", {}).items()
        if _pid_alive(pid, state.get("binaries", {}).get(name, name))
    }


def cmd_up(state_dir: Path) -> int:
    running = _running(state_dir)
    if running:
        state = _read_state(state_dir) or {}
        print(f"control plane already running ({state.get('url')}, pids {running})")
        print(f"kubeconfig: {state.get('kubeconfig')}")
        print(f"export KUBECONFIG={state.get('kubeconfig')}")
        return 0
    try:
        binaries = ensure_binaries()
    except ControlPlaneError as err:
        print(f"cannot start the control plane: {err}", file=sys.stderr)
        return 1
    shutil.rmtree(state_dir, ignore_errors=True)
    cp = ControlPlane(state_dir, binaries, detach=True)
    try:
        cp.start()
    except ControlPlaneError as err:
        print(str(err), file=sys.stderr)
        return 1
    took = f"{cp.startup_seconds:.1f}s"
    print(f"kube-apiserver {cp.version} ready at {cp.url} in {took} (etcd {binaries.etcd_version})")
    print(f"pids: {cp.pids()}; logs: {cp.etcd_log}, {cp.apiserver_log}")
    print(f"kubeconfig: {cp.kubeconfig}")
    print(f"export KUBECONFIG={cp.kubeconfig}")
    return 0


def cmd_down(state_dir: Path) -> int:
    state = _read_state(state_dir)
    if state is None:
        print(f"no control plane state in {state_dir}")
        return 0
    running = _running(state_dir)
    # apiserver first: it shuts down gracefully only while etcd still answers
    for name in ("kube-apiserver", "etcd"):
        if name not in running:
            continue
        os.kill(running[name], signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and name in _running(state_dir):
            time.sleep(0.1)
        if name in _running(state_dir):
            print(f"{name} (pid {running[name]}) did not stop on SIGTERM in 20s; killing")
            os.kill(running[name], signal.SIGKILL)
    shutil.rmtree(state_dir, ignore_errors=True)
    print(f"control plane stopped ({', '.join(running) or 'nothing was running'}); removed {state_dir}")
    return 0


def cmd_status(state_dir: Path) -> int:
    state = _read_state(state_dir)
    running = _running(state_dir)
    if not state or not running:
        print("control plane not running")
        return 1
    print(f"running: {running} at {state['url']}\nexport KUBECONFIG={state['kubeconfig']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "build"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_STATE_DIR, help="state directory (%(default)s)")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            print(ensure_binaries())
        except ControlPlaneError as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.command](args.dir.resolve())


if __name__ == "__main__":
    sys.exit(main())
