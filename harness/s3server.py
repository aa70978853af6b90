"""A real S3-compatible server for the s3:// tests: MinIO, built from Go modules (e2e/build-gotool.sh minio).

It serves TLS with a certificate from a CA of its own (the CA a pipeline's caSecretRef carries), in a
region of its own (requests signed for another region are refused, so a test sees the region applied),
on a loopback port, or on an address of the network namespace the calling thread is in (a cluster node's:
start it inside `Cluster.network()`; the process and the readiness probe stay there). Ended by PID.

    python -m harness.s3server     start one on loopback until Ctrl-C (prints the endpoint and the CA file)
"""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tritonpipeline.local.tritonserver import free_port

from .gotools import tool_path
from .pki import issue, make_ca
from .process import end, start_and_wait

REGION = "eu-test-1"
ACCESS_KEY = "tritonpipeline"
# a test server's own secret, on loopback or in a test's namespace only
SECRET_KEY = "tritonpipeline-test-secret"
READY_SECONDS = 60


class S3ServerUnavailable(RuntimeError):
    """MinIO is not built here (or openssl is missing): the tests that need it skip with this reason."""


def minio_binary() -> Path:
    """The cached MinIO binary, or S3ServerUnavailable saying how to build it."""
    path = tool_path("minio")
    if not path.is_file():
        raise S3ServerUnavailable(f"MinIO is not built: run `bash e2e/build-gotool.sh minio` ({path})")
    return path


@dataclass
class S3Server:
    """A running MinIO: its endpoint URL, the CA file that verifies it, its data directory and process."""

    endpoint: str
    ca_file: Path
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log_file: Path
    region: str = REGION
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    def client(self, **overrides: str) -> object:
        """A boto3 S3 client for this server (path-style, its region and CA); keyword arguments replace
        boto3.client's (aws_secret_access_key=..., region_name=...)."""
        import boto3
        from botocore.config import Config

        kwargs = {
            "endpoint_url": self.endpoint,
            "region_name": self.region,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "verify": str(self.ca_file),
            "config": Config(s3={"addressing_style": "path"}),
            **overrides,
        }
        return boto3.client("s3", **kwargs)

    def upload_tree(self, bucket: str, prefix: str, root: Path, *, folder_markers: bool = True) -> list[str]:
        """Create `bucket` and put every file under `root` at `prefix/<relative path>`; with
        `folder_markers`, also the empty `.../` objects consoles create for each directory.
        Returns the keys."""
        s3 = self.client()
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):  # type: ignore[attr-defined]
            s3.create_bucket(  # type: ignore[attr-defined]
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": self.region}
            )
        keys = []
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            key = f"{prefix}/{path.relative_to(root).as_posix()}".lstrip("/")
            if path.is_dir():
                if folder_markers:
                    s3.put_object(Bucket=bucket, Key=key + "/", Body=b"")  # type: ignore[attr-defined]
                    keys.append(key + "/")
            else:
                s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())  # type: ignore[attr-defined]
                keys.append(key)
        return keys

    def stop(self) -> None:
        """End MinIO by its PID (SIGTERM, then SIGKILL)."""
        end(self.proc, 15)


def make_certificates(pki: Path, addresses: tuple[str, ...]) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for `addresses` (IPs or DNS names)."""
    pki.mkdir(parents=True, exist_ok=True)
    make_ca(pki)
    names = ",".join(f"IP:{a}" if a.replace(".", "").isdigit() or ":" in a else f"DNS:{a}" for a in addresses)
    crt, key = issue(
        pki,
        "minio",
        "/CN=minio",
        f"subjectAltName={names}\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    return pki / "ca.crt", crt, key


def start(
    workdir: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    addresses: tuple[str, ...] = (),
) -> S3Server:
    """Start MinIO serving https://host:port in the calling thread's network namespace, with a
    certificate valid for `host` and `addresses`. Waits until it answers its health check."""
    binary = minio_binary()
    port = port or free_port()
    ca, crt, key = make_certificates(workdir / "pki", (host, *addresses))
    certs = workdir / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    (certs / "public.crt").write_bytes(crt.read_bytes())
    (certs / "private.key").write_bytes(key.read_bytes())
    (certs / "private.key").chmod(0o600)
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "MINIO_ROOT_USER": ACCESS_KEY,
        "MINIO_ROOT_PASSWORD": SECRET_KEY,
        "MINIO_SITE_REGION": REGION,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
    }
    cmd = [str(binary), "server", str(data), "--address", f"{host}:{port}", "--certs-dir", str(certs)]
    cmd += ["--console-address", f"{host}:{free_port()}", "--quiet"]
    log_file = workdir / "minio.log"
    endpoint = f"https://{host}:{port}"
    proc = start_and_wait(
        "MinIO",
        cmd,
        lambda: _live(f"{endpoint}/minio/health/live", ca),
        log=log_file,
        timeout=READY_SECONDS,
        tail=lambda: log_file.read_text()[-2000:],
        interval=0.3,
        env=env,
    )
    return S3Server(endpoint, ca, data, proc, log_file)


def _live(url: str, ca_file: Path) -> bool:
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running(workdir: Path, **kwargs: object) -> Iterator[S3Server]:
    server = start(workdir, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, running(Path(tmp)) as server:
        print(f"MinIO at {server.endpoint} (CA {server.ca_file}, region {server.region}); Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            server.proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
