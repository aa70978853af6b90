"""Kubeconfigs for identities other than the control plane's admin, and a client for one."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from tritonpipeline.kube.api_client import Kube


def token_kubeconfig(cp: Any, token: str, path: Path, user: str = "service-account") -> Path:
    """A kubeconfig for control plane `cp` that authenticates with `token` only (no client certificate)."""
    ca = base64.b64encode((cp.pki / "ca.crt").read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": cp.url, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "e2e", "user": user}}],
        "current-context": user,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def kube_for(kubeconfig: Path, field_manager: str = "e2e") -> Kube:
    """A Kube client (no retries) authenticated as the kubeconfig says."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return Kube(client.ApiClient(configuration), field_manager, retries=0)
