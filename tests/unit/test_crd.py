"""The generated TritonPipeline CRD against a real kube-apiserver + etcd: the committed copy cannot drift
from the spec, the examples are admitted with server-side defaults, bad objects are refused at admission
with a message that names the field, and the printer columns, names and subresources are what kubectl
shows. Here the pure tests; those on real components are in tests/component/test_crd.py."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import BaseModel

from helpers import ROOT
from support.crd import (
    AGREEMENT,
    OK,
)
from tritonpipeline import spec as spec_module
from tritonpipeline.render.crd import crd, crd_yaml

CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


# --- 1. single source; the examples are admitted, with server-side defaults ------------------------


def test_committed_crd_is_the_generated_one() -> None:
    assert CRD_FILE.read_text() == crd_yaml(), "crds/ is stale: run `make generate`"
    assert yaml.safe_load(CRD_FILE.read_text()) == crd()


def _cel_messages(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        yield from (v["message"] for v in schema.get("x-kubernetes-validations", ()))
        for value in schema.values():
            yield from _cel_messages(value)


def test_every_cel_rule_has_rows_on_both_sides() -> None:
    """A CEL rule added to the CRD (a spec Rule) without rows in AGREEMENT fails here."""
    refused = [words for *_, (path, words) in AGREEMENT if words]
    for message in set(_cel_messages(crd())):
        assert any(words in message for words in refused), f"no AGREEMENT row breaks the rule {message!r}"
    admitted = {row[0] for row in AGREEMENT if row[3] == OK}
    assert len(admitted) >= len(set(_cel_messages(crd()))), "each rule needs a row that passes it too"


# The spec's validator methods that have no CEL form, and why: what they refuse is admitted by the
# apiserver and refused by `validate` and the operator (an InvalidSpec condition). Every other check is a
# type bound, a pattern or a Rule, which the CRD carries.
PASSED_THROUGH = (
    "a Kubernetes object's field, passed through (x-kubernetes-preserve-unknown-fields): checked as the "
    "apiserver checks it in that object (spec/kubernetes.py), by the webhook before the CR is stored"
)


VALIDATOR_ONLY = {
    "Autoscaling._number": "not a check: an integer target is taken as a number",
    "Model._scalar_parameters": "parameters is free-form (x-kubernetes-preserve-unknown-fields)",
    "ModelRepository._check_uri": "scheme and claim-name messages per scheme; the schema bounds the length",
    "Server._flags": "tritonserver's flag grammar (tritonserver_options) has no CEL form",
    "Server._labels": "label keys and values of a free map: a CEL rule over them exceeds the cost budget",
    "Server._trace_flags": "tritonserver's flag grammar (tritonserver_options) has no CEL form",
    "Tracing._attributes": "keys and values of a free map: a CEL rule over them exceeds the cost budget",
    "Server._resources": PASSED_THROUGH,
    "Server._strategy": PASSED_THROUGH,
    "Server._tolerations": PASSED_THROUGH,
    "Server._affinity": PASSED_THROUGH,
    "Server._ids": PASSED_THROUGH,
    "Server._image": "the runtimes' reference grammar (spec/kubernetes.py): the apiserver takes any image, "
    "and the path's length limit depends on how the host is split off, which a pattern cannot say",
    "NetworkPolicy._peers": PASSED_THROUGH,
    "Metadata._known_fields": "the apiserver checks ObjectMeta itself; the CRD's schema cannot describe it",
    "Metadata._labels": "the apiserver checks ObjectMeta itself (the same rules, for validate)",
    "Metadata._annotations": "the apiserver checks ObjectMeta itself (the same rules, for validate)",
    "Case._one_operator": "equals and in take any scalar (nodes without a type), which CEL cannot read",
    "Condition._one_operator": "equals and in take any scalar (nodes without a type), which CEL cannot read",
    "PipelineSpec._instance_gpus": "each instance group's GPU indices against server.gpus, across the spec",
    "TritonPipeline._api_version": "the apiserver serves this CRD at this group and version only",
    "TritonPipeline._kind": "the apiserver serves this CRD under this kind only",
}


def test_every_spec_validator_is_in_the_crd_or_listed_with_its_reason() -> None:
    """A validator method added to spec.py without a CEL form fails here until it is a Rule (then the
    agreement table covers it) or is listed in VALIDATOR_ONLY with the reason."""
    found = {
        f"{cls.__name__}.{name}"
        for _, cls in inspect.getmembers(spec_module, inspect.isclass)
        if issubclass(cls, BaseModel) and cls.__module__.startswith(spec_module.__name__ + ".")
        for decorators in (cls.__pydantic_decorators__,)
        for name in (*decorators.field_validators, *decorators.model_validators)
        if name != "_object_rules"  # runs the class's RULES, which the CRD carries as CEL
    }
    assert found == set(VALIDATOR_ONLY)


def schema_nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, node) for `schema` and every schema under it: properties, list items (`path[]`) and map
    values (`path.*`)."""
    yield path or ".", schema
    for name, sub in schema.get("properties", {}).items():
        yield from schema_nodes(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from schema_nodes(schema[key], f"{path}[]" if key == "items" else f"{path}.*")


def _free_form(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """The paths under `schema` that keep whatever is sent (x-kubernetes-preserve-unknown-fields) without a
    rule that refuses a mapping or a list there."""
    for at, node in schema_nodes(schema, path):
        scalar = node.get("maxProperties") == node.get("maxItems") == 0
        if node.get("x-kubernetes-preserve-unknown-fields") and not scalar:
            yield at


def test_no_field_of_the_spec_keeps_whatever_is_sent() -> None:
    """A field that keeps any content lets a tenant store a mapping nested deeper than the operator can
    decode (issue 54: affinity 1,500 levels deep stopped the operator for every tenant)."""
    root = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert list(_free_form(root["properties"]["spec"], "spec")) == []
