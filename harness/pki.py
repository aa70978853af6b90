"""A throwaway CA and the certificates it signs, with the openssl CLI: the control plane's
(harness/controlplane.py: the apiserver's serving certificate, users' client certificates), the S3
server's and the metrics adapter's."""

from __future__ import annotations

import subprocess
from pathlib import Path


class OpensslError(RuntimeError):
    """openssl failed; the message holds its command and what it wrote."""


def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OpensslError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


def ec_key(path: Path) -> None:
    ec = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    openssl("genpkey", *ec, "-out", str(path), cwd=path.parent)
    path.chmod(0o600)


def make_ca(pki: Path) -> None:
    ec_key(pki / "ca.key")
    openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", "3650", "-subj",
        "/CN=tritonpipeline-e2e-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki,
    )  # fmt: skip


def issue(pki: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    """Sign <name>.crt/<name>.key with the CA. `extensions`: openssl v3 extension lines."""
    key, csr, crt, ext = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    ec_key(key)
    openssl("req", "-new", "-key", key.name, "-out", csr.name, "-subj", subject, cwd=pki)
    ext.write_text(extensions)
    openssl(
        "x509", "-req", "-in", csr.name, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", crt.name, "-days", "365", "-extfile", ext.name, cwd=pki,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
    return crt, key


def client_subject(user: str, groups: tuple[str, ...]) -> str:
    # Kubernetes maps CN to the user name and each O to a group.
    for part in (user, *groups):
        if not part or any(c in part for c in "/=+,\\"):
            raise ValueError(f"unsupported character in certificate subject part {part!r}")
    return "".join(f"/O={g}" for g in groups) + f"/CN={user}"
