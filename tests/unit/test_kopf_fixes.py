"""runtime/kopf_fixes.py's correction of kopf's admission patch: an empty patch is answered without a copy
of the object (kopf deep-copied the whole object first: two fifths of the event loop on a storm of 0.9 MB
dry runs, issue 54); a patch with content comes out as kopf's own."""

from __future__ import annotations

import threading

from kopf._cogs.structs import bodies, patches

from tritonpipeline.runtime import kopf_fixes


def uncopyable_body() -> bodies.Body:
    """An object no deep copy can be made of (a lock in its spec): a copy raises TypeError."""
    return bodies.Body({"metadata": {"name": "p"}, "spec": {"lock": threading.Lock()}})


def test_an_empty_patch_is_answered_without_copying_the_object() -> None:
    body = uncopyable_body()
    assert kopf_fixes.as_json_patch(patches.Patch(body=body)) == []


def test_a_patch_with_content_is_kopfs_own() -> None:
    raw = {"metadata": {"name": "p", "annotations": {"a": "1"}}, "spec": {"x": [1, 2]}}
    ours, theirs = patches.Patch(body=bodies.Body(raw)), patches.Patch(body=bodies.Body(raw))
    for patch in (ours, theirs):
        patch.meta.annotations["b"] = "2"
        patch.spec["x"] = None
    expected = kopf_fixes.KOPF_AS_JSON_PATCH(theirs)
    assert kopf_fixes.as_json_patch(ours) == expected
    assert {"op": "add", "path": "/metadata/annotations/b", "value": "2"} in expected


def test_install_puts_the_correction_in_kopf() -> None:
    kopf_fixes.install()
    kopf_fixes.install()  # once: a second call changes nothing
    assert patches.Patch.as_json_patch is kopf_fixes.as_json_patch
