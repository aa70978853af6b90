"""The operator's bounded cache of compiled pipelines (runtime/cache.py) and what the status poll takes
from it (reconcile/pipeline.py `parsed`): pure."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import pytest
from kubernetes.client import ApiClient

from helpers import example
from tritonpipeline.errors import SpecError
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.reconcile import pipeline
from tritonpipeline.runtime.cache import BoundedCache
from tritonpipeline.runtime.state import OperatorState
from tritonpipeline.settings import Settings


def test_a_value_is_current_while_its_tag_is() -> None:
    cache = BoundedCache(100)
    cache.put("a", "v1", "compiled v1", 10)
    assert cache.get("a", "v1") == "compiled v1"
    assert cache.get("a", "v2") is None  # the spec changed: compile again
    cache.put("a", "v2", "compiled v2", 10)
    assert cache.get("a", "v2") == "compiled v2" and cache.weight == 10


def test_the_least_recently_used_go_first_once_over_the_budget() -> None:
    cache = BoundedCache(30)
    for key in "abc":
        cache.put(key, "t", key.upper(), 10)
    assert cache.get("a", "t") == "A"  # a used: b is now the oldest
    cache.put("d", "t", "D", 10)
    assert cache.get("b", "t") is None
    assert [cache.get(k, "t") for k in "acd"] == ["A", "C", "D"]
    assert cache.weight == 30 and len(cache) == 3
    cache.put("huge", "t", "H", 31)  # heavier than the whole budget: not kept, nothing dropped for it
    assert cache.get("huge", "t") is None and len(cache) == 3
    cache.pop("a")
    assert cache.weight == 20


# --------------------------------------------------------------------------- the status poll's spec


def _doc() -> dict[str, Any]:
    doc = example("fanout", "pvc://models/triton")
    doc["metadata"]["namespace"] = "team"
    return doc


def _state() -> OperatorState:
    return OperatorState(settings=Settings(), kube=Kube(ApiClient(), "test"))  # no call is made


def test_the_status_poll_parses_and_never_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll of a pipeline the cache no longer holds parses its spec (cheap) and compiles nothing."""

    def no_compile(*_: Any) -> None:
        raise AssertionError("the status poll compiled a pipeline")

    monkeypatch.setattr(pipeline, "compile_cr", no_compile)
    state, doc = _state(), _doc()
    tp = asyncio.run(pipeline.parsed(state, kopf.Body(doc)))
    assert (tp.name, len(tp.spec.models)) == (doc["metadata"]["name"], len(doc["spec"]["models"]))
    assert len(state.compiled) == 0  # a parse is not kept in place of a compilation


def test_the_status_poll_takes_a_kept_compilation_or_its_error() -> None:
    state, doc = _state(), _doc()
    body = kopf.Body(doc)
    compiled = asyncio.run(pipeline.compiled(state, body))
    assert asyncio.run(pipeline.parsed(state, body)) is compiled[0]
    bad = copy.deepcopy(doc)
    bad["spec"]["pipelines"][0]["steps"][0]["model"] = "no-such-model"
    with pytest.raises(SpecError):
        asyncio.run(pipeline.compiled(state, kopf.Body(bad)))
    with pytest.raises(SpecError):
        asyncio.run(pipeline.parsed(state, kopf.Body(bad)))
