"""The operator's bounded cache of compiled pipelines (runtime/cache.py): pure."""

from __future__ import annotations

from tritonpipeline.runtime.cache import BoundedCache


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
