"""s3:// and gs:// model sources in the pod spec (pure renderers) and their spec errors: endpoint, region,
CA bundle and credentials reach the init container only, as the variables and files the SDKs read."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline


def doc_with(repository: dict[str, Any], **server: Any) -> dict[str, Any]:
    doc = example("fanout")
    doc["metadata"] = {"name": "vision", "namespace": "ml"}
    doc["spec"]["modelRepository"] = repository
    doc["spec"]["server"] = {**doc["spec"].get("server", {}), **server}
    return doc


def pod_of(doc: dict[str, Any], settings: Settings | None = None) -> dict[str, Any]:
    tp = parse_pipeline(doc)
    rendered = render_children(tp, compile_pipeline(tp), settings or Settings())
    return rendered.deployment["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def mounted_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """(the volume, the key of it) that puts a file at `path` in `container`."""
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    source = volume.get("secret") or volume.get("configMap")
    assert source is not None, volume
    item = next(i for i in source["items"] if f"{mount['mountPath']}/{i['path']}" == path)
    return volume, item["key"]


def test_s3_endpoint_region_ca_and_credentials_reach_the_init_container_only() -> None:
    pod = pod_of(
        doc_with(
            {
                "uri": "s3://models/team/triton",
                "secretRef": {"name": "bucket-creds"},
                "s3": {
                    "endpoint": "https://minio.storage.svc:9000",
                    "region": "eu-test-1",
                    "caConfigMapRef": {"name": "storage-ca", "key": "bundle.pem"},
                },
            }
        )
    )
    init, triton = pod["initContainers"][0], pod["containers"][0]
    env = env_of(init)
    assert env["AWS_ENDPOINT_URL_S3"] == "https://minio.storage.svc:9000"
    assert env["AWS_REGION"] == "eu-test-1"
    # a custom endpoint is an S3-compatible store: path-style (bucket.minio.storage.svc does not resolve)
    assert env["TRITONPIPELINE_S3_ADDRESSING_STYLE"] == "path"
    volume, key = mounted_file(pod, init, env["AWS_CA_BUNDLE"])
    assert volume["configMap"]["name"] == "storage-ca" and key == "bundle.pem"
    assert init["envFrom"] == [{"secretRef": {"name": "bucket-creds"}}]
    assert "--source" in init["args"] and "s3://models/team/triton" in init["args"]
    # Triton gets none of it
    assert "envFrom" not in triton
    assert not {"AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE"} & set(env_of(triton))
    assert not any(m["name"] == volume["name"] for m in triton["volumeMounts"])


def test_s3_ca_from_a_secret_and_addressing_style_override() -> None:
    pod = pod_of(
        doc_with(
            {
                "uri": "s3://models/triton",
                "s3": {
                    "endpoint": "https://s3.internal",
                    "addressingStyle": "virtual",
                    "caSecretRef": {"name": "ca"},
                },
            }
        )
    )
    init = pod["initContainers"][0]
    env = env_of(init)
    assert env["TRITONPIPELINE_S3_ADDRESSING_STYLE"] == "virtual"
    volume, key = mounted_file(pod, init, env["AWS_CA_BUNDLE"])
    assert volume["secret"]["secretName"] == "ca" and key == "ca.crt"
    assert "envFrom" not in init  # no secretRef: the pod's identity (IRSA)


def test_plain_s3_sets_nothing_boto3_would_not_choose() -> None:
    init = pod_of(doc_with({"uri": "s3://models/triton"}))["initContainers"][0]
    assert "env" not in init and "envFrom" not in init


def test_gcs_key_secret_is_a_file_for_google_application_credentials() -> None:
    pod = pod_of(
        doc_with(
            {
                "uri": "gs://models/triton",
                "secretRef": {"name": "gcs-sa"},
                "gcs": {"credentialsKey": "sa.json"},
            }
        )
    )
    init, triton = pod["initContainers"][0], pod["containers"][0]
    path = env_of(init)["GOOGLE_APPLICATION_CREDENTIALS"]
    volume, key = mounted_file(pod, init, path)
    assert volume["secret"]["secretName"] == "gcs-sa" and key == "sa.json"
    assert "envFrom" not in init  # a key file, not variables
    assert not any(m["name"] == volume["name"] for m in triton["volumeMounts"])
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env_of(triton)


def test_gcs_default_key_name_and_workload_identity() -> None:
    pod = pod_of(doc_with({"uri": "gs://models/triton", "secretRef": {"name": "gcs-sa"}}))
    init = pod["initContainers"][0]
    _, key = mounted_file(pod, init, env_of(init)["GOOGLE_APPLICATION_CREDENTIALS"])
    assert key == "key.json"
    # no key: the pod's identity, through the pipeline's service account (the init container runs as it)
    allowed = Settings(allowed_service_accounts=("ml/model-reader",))  # the cluster admin's grant
    pod = pod_of(doc_with({"uri": "gs://models/triton"}, serviceAccountName="model-reader"), allowed)
    assert pod["serviceAccountName"] == "model-reader"
    assert "env" not in pod["initContainers"][0]
    assert pod.get("automountServiceAccountToken") is not False


@pytest.mark.parametrize(
    ("repository", "path", "words"),
    [
        ({"uri": "gs://b/m", "s3": {"region": "eu-west-1"}}, "spec.modelRepository.s3", "s3:// sources only"),
        ({"uri": "pvc://claim/m", "gcs": {}}, "spec.modelRepository.gcs", "gs:// sources only"),
        ({"uri": "s3://b/m", "s3": {"endpoint": "minio:9000"}}, "spec.modelRepository.s3.endpoint", "http"),
        ({"uri": "s3://b/m", "s3": {"region": "EU West"}}, "spec.modelRepository.s3.region", "us-east-1"),
        (
            {"uri": "s3://b/m", "s3": {"caSecretRef": {"name": "a"}, "caConfigMapRef": {"name": "b"}}},
            "spec.modelRepository.s3.caConfigMapRef",
            "not both",
        ),
        (
            {"uri": "s3://b/m", "s3": {"endpoint": "http://minio:9000", "caSecretRef": {"name": "a"}}},
            "spec.modelRepository.s3.endpoint",
            "https://",
        ),
        (
            {"uri": "s3://b/m", "s3": {"addressingStyle": "dns"}},
            "spec.modelRepository.s3.addressingStyle",
            "path",
        ),
        (
            {"uri": "s3://b/m", "s3": {"caSecretRef": {"name": "a", "key": "a/b"}}},
            "spec.modelRepository.s3.caSecretRef.key",
            "Secret data key",
        ),
        ({"uri": "gs://b/m", "gcs": {"keyFile": "x"}}, "spec.modelRepository.gcs.keyFile", ""),
    ],
)
def test_storage_options_errors_name_the_field(repository: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_pipeline(doc_with(repository))
    assert [p.path for p in err.value.problems] == [path]
    assert words in err.value.problems[0].message
