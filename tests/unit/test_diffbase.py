"""The operator's kopf diff base (runtime/diffbase.py): a digest of what was last handled, whatever the
spec's size, read the way kopf's processing reads it (fetch, build, diff). Pure: kopf's own Body, Patch
and diff, no API server (tests/component/test_operator.py runs it on one)."""

from __future__ import annotations

import copy
import json
from typing import Any

import kopf
from kopf._cogs.structs import diffs

from tritonpipeline.runtime.diffbase import DigestDiffBaseStorage, spec_changed
from tritonpipeline.settings import GROUP

DIGEST = f"{GROUP}/last-handled-digest"
COPY = f"{GROUP}/last-handled-configuration"


def pipeline(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "resourceVersion": "7", "generation": 1},
        "spec": {"models": [{"name": "m", "backend": "python"}], **spec},
        "status": {"observedGeneration": 1},
    }


def handled(obj: dict[str, Any], storage: kopf.DiffBaseStorage) -> dict[str, Any]:
    """`obj` as it is after kopf stored its diff base there (the patch merged as the apiserver would)."""
    body = kopf.Body(obj)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    out = copy.deepcopy(obj)
    annotations = out["metadata"].setdefault("annotations", {})
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return out


def changed(obj: dict[str, Any], storage: kopf.DiffBaseStorage) -> bool | None:
    """What kopf's processing concludes: None for a new object, else whether the essence changed."""
    body = kopf.Body(obj)
    old = storage.fetch(body=body)
    return None if old is None else bool(diffs.diff(old, storage.build(body=body)))


def test_a_large_spec_is_marked_handled_with_a_digest_of_constant_size() -> None:
    storage = DigestDiffBaseStorage(prefix=GROUP)
    obj = pipeline(parameters={"blob": "x" * 400_000})
    assert changed(obj, storage) is None  # never handled: kopf's create
    after = handled(obj, storage)
    annotations = after["metadata"]["annotations"]
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 300, annotations
    assert changed(after, storage) is False


def test_every_change_kopf_would_see_is_seen_and_nothing_else() -> None:
    storage = DigestDiffBaseStorage(prefix=GROUP)
    base = handled(pipeline(), storage)
    for edit in (
        lambda o: o["spec"]["models"][0].update(backend="onnxruntime"),
        lambda o: o["spec"].update(server={"replicas": 2}),
        lambda o: o["metadata"].setdefault("labels", {}).update(team="a"),
        lambda o: o["metadata"]["annotations"].update({"example.com/owner": "b"}),
    ):
        edited = copy.deepcopy(base)
        edit(edited)
        assert changed(edited, storage) is True, edited
    for same in (
        lambda o: o["status"].update(observedGeneration=5),
        lambda o: o["metadata"].update(resourceVersion="99", generation=2),
        lambda o: o["metadata"]["annotations"].update({f"{GROUP}/on_update": '{"retries":1}'}),  # progress
        lambda o: o["metadata"]["annotations"].update(
            {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
        ),
        lambda o: o["metadata"].update(labels={}),
    ):
        edited = copy.deepcopy(base)
        same(edited)
        assert changed(edited, storage) is False, edited


def test_a_pipeline_an_earlier_release_handled_is_compared_with_its_copy_until_handled_again() -> None:
    storage = DigestDiffBaseStorage(prefix=GROUP)
    earlier = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)  # what releases before this one used
    obj = handled(pipeline(), earlier)
    assert COPY in obj["metadata"]["annotations"] and DIGEST not in obj["metadata"]["annotations"]
    assert changed(obj, storage) is False  # not new: no Created after the upgrade
    obj["spec"]["server"] = {"replicas": 3}
    assert changed(obj, storage) is True
    after = handled(obj, storage)
    assert COPY not in after["metadata"]["annotations"]  # the copy goes when it is next handled
    assert changed(after, storage) is False


def test_the_digest_reads_the_content_not_its_order() -> None:
    storage = DigestDiffBaseStorage(prefix=GROUP)
    obj = pipeline(server={"replicas": 1, "gpus": 0})
    reordered = json.loads(json.dumps(obj))
    reordered["spec"]["server"] = {"gpus": 0, "replicas": 1}
    assert changed(handled(obj, storage) | {"spec": reordered["spec"]}, storage) is False


def kopf_diff(obj: dict[str, Any], storage: kopf.DiffBaseStorage) -> Any:
    body = kopf.Body(obj)
    return diffs.diff(storage.fetch(body=body), storage.build(body=body))


def test_the_diff_says_whether_the_spec_changed_or_only_the_labels_and_annotations() -> None:
    """The update handler posts an Updated event for a spec change only: the stand-in differs from the
    current essence in the part that changed, with the digest as with kopf's copy."""
    for storage, earlier in (
        (DigestDiffBaseStorage(prefix=GROUP), DigestDiffBaseStorage(prefix=GROUP)),
        (DigestDiffBaseStorage(prefix=GROUP), kopf.AnnotationsDiffBaseStorage(prefix=GROUP)),
    ):
        base = handled(pipeline(), earlier)
        labelled = copy.deepcopy(base)
        labelled["metadata"].setdefault("labels", {})["team"] = "a"
        annotated = copy.deepcopy(base)
        annotated["metadata"]["annotations"]["example.com/owner"] = "b"
        respecced = copy.deepcopy(base)
        respecced["spec"]["server"] = {"replicas": 2}
        both = copy.deepcopy(respecced)
        both["metadata"].setdefault("labels", {})["team"] = "a"
        assert [spec_changed(kopf_diff(o, storage)) for o in (labelled, annotated, respecced, both)] == [
            False,
            False,
            True,
            True,
        ], type(earlier).__name__
        assert not kopf_diff(base, storage)
