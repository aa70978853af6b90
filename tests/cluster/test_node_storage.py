"""s3:// on real pods: a real S3-compatible server (MinIO built from Go modules, TLS from a test CA, a
region of its own) runs outside the cluster on the client's address in the cluster network (a kind
node's address), started by the test and ended by PID;
model_repository/ is uploaded with folder marker objects; a pipeline with an s3:// uri, the endpoint,
region, CA bundle (a Secret) and credentials (a Secret) becomes Ready, and the Triton pods it serves
answer correctly through the Service's ClusterIP. The init container of the operator image downloads
the models: the image's boto3 (the s3 extra) is what is proven here.

Marker `anycluster`: `make e2e` runs it on kind (MinIO from `e2e/build-gotool.sh minio`).
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from node_cluster import RESTRICTED, ROOT, SMALL, Cluster, diagnostics, wait

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.minio, pytest.mark.timeout(1200)]

NAMESPACE = "storage"  # a namespace of its own: the other node modules share the session's cluster
BUCKET, PREFIX = "models", "team/triton"
MINIO_PORT = 19000


@pytest.fixture(scope="module")
def minio_in_node(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """MinIO listening on the client's address in the cluster network (pods reach it there)."""
    from harness import s3server

    try:
        with cluster.network():
            server = s3server.start(tmp_path_factory.mktemp("minio"), host=cluster.address(), port=MINIO_PORT)
    except s3server.S3ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        tree = tmp_path_factory.mktemp("tree")
        for model in ("extractor", "head_b", "head_c"):
            shutil.copytree(ROOT / "model_repository" / model, tree / model)
        with cluster.network():
            keys = server.upload_tree(BUCKET, PREFIX, tree)
        assert any(k.endswith("/") for k in keys)  # folder markers, which the download must skip
        yield server
    finally:
        # the module's pipelines go first (their pods would take CPU from the scenarios after it)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        server.stop()


def _secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": encoded,
    }


def _pipeline(cluster: Cluster, server: Any, name: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["modelRepository"] = {
        "uri": f"s3://{BUCKET}/{PREFIX}",
        "secretRef": {"name": "bucket-creds"},
        "s3": {"endpoint": server.endpoint, "region": server.region, "caSecretRef": {"name": "minio-ca"}},
    }
    doc["spec"]["server"].update(gpus=0, image=cluster.images["triton"].name, resources=SMALL)
    return doc


def _ready(cluster: Cluster, name: str) -> dict[str, Any]:
    cr = json.loads(cluster.kubectl("get", "tritonpipeline", name, "-n", NAMESPACE, "-o", "json"))
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


def test_fanout_from_minio_over_tls_is_served_through_the_cluster_ip(
    cluster: Cluster, chart_operator: dict[str, Any], minio_in_node: Any
) -> None:
    server = minio_in_node
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": RESTRICTED},
    }
    secrets = [
        _secret(
            "bucket-creds",
            {"AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key},
        ),
        _secret("minio-ca", {"ca.crt": Path(server.ca_file).read_text()}),
    ]
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [namespace, *secrets]}),
    )
    name = "vision-s3"
    t = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_pipeline(cluster, server, name)))
    wait(
        "TritonPipeline Ready",
        lambda: _ready(cluster, name).get("status") == "True",
        240,
        lambda: diagnostics(cluster, NAMESPACE),
    )
    print(f">> kubectl apply (s3:// source) -> TritonPipeline Ready: {time.monotonic() - t:.1f}s")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    init_logs = cluster.kubectl(
        "logs", "-n", NAMESPACE, pods[0]["metadata"]["name"], "-c", "assemble-repository"
    )
    assert "3 model(s)" in init_logs, init_logs  # downloaded in the pod, not found elsewhere
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    url = f"{service['spec']['clusterIP']}:{port}"

    def answered() -> Any:
        proc = cluster.run([sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", url, "vision"])
        return proc if proc.returncode == 0 else None

    proc = wait("inference through the ClusterIP", answered, 60, lambda: diagnostics(cluster, NAMESPACE))
    print(proc.stdout)
    assert "PASS vision: FEATURES=2x+1, SCORE_B=3(2x+1)-2" in proc.stdout


def test_wrong_credentials_are_reported_in_the_status(
    cluster: Cluster, chart_operator: dict[str, Any], minio_in_node: Any
) -> None:
    """The init container's one-line error reaches the pipeline's Ready condition."""
    server = minio_in_node
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            _secret(
                "wrong-creds",
                {"AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": "wrong-secret"},
            )
        ),
    )
    name = "vision-s3-denied"
    doc = _pipeline(cluster, server, name)
    doc["spec"]["modelRepository"]["secretRef"] = {"name": "wrong-creds"}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def reported() -> dict[str, Any] | None:
        ready = _ready(cluster, name)
        return ready if "SignatureDoesNotMatch" in ready.get("message", "") else None

    ready = wait("the credentials error in status", reported, 180, lambda: diagnostics(cluster, NAMESPACE))
    assert ready["status"] == "False"
    assert "assemble-repository" in ready["message"] and "s3://models/team/triton" in ready["message"]
    cluster.kubectl("delete", "tritonpipeline", name, "-n", NAMESPACE, "--wait=false")
