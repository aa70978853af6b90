"""The ConfigMap format of the generated repository (render/packing.py): what the operator packs, the init
container unpacks to the same bytes, whatever the files hold and however the parts are split; an
incomplete, mixed or tampered set is refused with a message instead of a half-built repository."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from helpers import example
from tritonpipeline.compiler import compile_pipeline, files_digest
from tritonpipeline.errors import SpecError
from tritonpipeline.local.assemble import read_generated_dir
from tritonpipeline.render.manifests import configmaps
from tritonpipeline.render.packing import Part, entries_of, pack, unpack
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")  # what the apiserver allows as a ConfigMap key
MODELS = ("extractor", "head_b")

FILES = {
    "extractor/config.pbtxt": b'name: "extractor"\nbackend: "python"\n',
    "router_0/1/model.py": b"import numpy\n\nprint('\xc3\xa9t\xc3\xa9')\n",  # UTF-8 text, not ASCII
    "vision/1/.keep": b"",
    "deep/a/b/c/d/e.bin": bytes(range(256)) * 2,  # not UTF-8: every byte value
    "with space/name (1)/ünïcode.txt": "tensor ∑ names\n".encode(),
    'odd/"quote"\'s\\back/tab\tfile': b"\x00\x01\xff\xfe",
    "crlf.txt": b"line\r\nline\r\n",
}


def configmap_objects(parts: list[Part]) -> list[dict[str, object]]:
    """Parts as ConfigMaps travel: through JSON (the API server's encoding)."""
    return json.loads(json.dumps([{"data": p.data, "binaryData": p.binary_data} for p in parts]))


def mounted(parts: list[Part], directory: Path) -> Path:
    """A projected volume of the ConfigMaps: one file per key, binaryData decoded, as kubelet writes it."""
    directory.mkdir()
    for cm in configmap_objects(parts):
        for key, text in cm["data"].items():  # type: ignore[attr-defined]
            (directory / key).write_bytes(text.encode())
        for key, b64 in cm["binaryData"].items():  # type: ignore[attr-defined]
            (directory / key).write_bytes(base64.b64decode(b64))
    return directory


@pytest.mark.parametrize("max_bytes", [900 * 1024, 1100, 900], ids=["one-part", "two-parts", "three-parts"])
def test_round_trip_through_a_mounted_volume(tmp_path: Path, max_bytes: int) -> None:
    parts = pack(FILES, MODELS, max_bytes)
    got = read_generated_dir(mounted(parts, tmp_path / "generated"))
    assert got.files == FILES
    assert got.models == MODELS
    assert got.digest == files_digest(FILES)
    assert len(parts) == {900 * 1024: 1, 1100: 2, 900: 3}[max_bytes]


@pytest.mark.parametrize("max_bytes", [900, 1000, 1100, 5000])
def test_every_part_is_within_the_limit_and_keys_are_valid(max_bytes: int) -> None:
    parts = pack(FILES, MODELS, max_bytes)
    for part in parts:
        # what the API server counts, with base64 counted encoded (the larger)
        stored = sum(len(k) + len(v.encode()) for k, v in (*part.data.items(), *part.binary_data.items()))
        assert stored <= max_bytes
        assert all(KEY_RE.fullmatch(k) for k in (*part.data, *part.binary_data))
        assert not set(part.data) & set(part.binary_data)
    # binary content goes to binaryData, text stays readable in data
    texts = {k: v for p in parts for k, v in p.data.items()}
    assert any("import numpy" in v for v in texts.values())
    assert all(base64.b64decode(v) for p in parts for v in p.binary_data.values())
    assert unpack(entries_of(configmap_objects(parts))).files == FILES  # type: ignore[arg-type]


def test_a_file_too_large_for_any_part_is_refused_with_its_name() -> None:
    files = {**FILES, "big/config.pbtxt": b"x" * 5000}
    with pytest.raises(SpecError) as info:
        pack(files, MODELS, 4000)
    assert "'big/config.pbtxt' is 5000 bytes, over the ConfigMap limit of 4000 bytes" in str(info.value)


def test_binary_files_count_at_their_encoded_size() -> None:
    """A 3000-byte binary file travels as 4000 base64 characters: it does not fit a 3500-byte part."""
    with pytest.raises(SpecError, match="'blob' is 3000 bytes"):
        pack({"blob": b"\xff" * 3000}, (), 3500)
    assert len(pack({"text": b"x" * 3000}, (), 3500)) == 1


def test_empty_repository_packs_to_one_part() -> None:
    parts = pack({}, ("m",), 2000)
    assert len(parts) == 1
    assert unpack(entries_of(configmap_objects(parts))).models == ("m",)  # type: ignore[arg-type]


def test_the_operators_configmaps_carry_the_compiled_repository() -> None:
    tp = parse_pipeline(example("fanout"))
    artifacts = compile_pipeline(tp)
    cms = configmaps(tp, artifacts, Settings(configmap_max_bytes=4000))
    assert len(cms) > 1
    got = unpack(entries_of(cms))
    assert got.files == artifacts.files
    assert got.models == artifacts.models
    assert got.digest == artifacts.digest()


def entries(max_bytes: int = 900) -> dict[str, bytes]:
    return entries_of(configmap_objects(pack(FILES, MODELS, max_bytes)))  # type: ignore[arg-type]


def test_a_missing_part_is_refused() -> None:
    parts = pack(FILES, MODELS, 900)
    assert len(parts) > 2
    partial = entries_of(configmap_objects(parts[:1] + parts[2:]))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="incomplete or from different versions"):
        unpack(partial)


def test_parts_of_two_versions_are_refused() -> None:
    old = entries_of(configmap_objects(pack(FILES, MODELS, 900)))  # type: ignore[arg-type]
    new = entries_of(configmap_objects(pack({**FILES, "crlf.txt": b"changed"}, MODELS, 900)))  # type: ignore[arg-type]
    mixed = {**new, **{k: v for k, v in old.items() if k == "manifest-000.json"}}
    with pytest.raises(SpecError, match="incomplete or from different versions"):
        unpack(mixed)


def test_a_changed_file_is_refused_by_the_digest() -> None:
    got = entries()
    key = next(k for k, v in got.items() if v == FILES["crlf.txt"])
    got[key] = b"line\nline\n"
    with pytest.raises(SpecError, match="do not match their digest"):
        unpack(got)


def test_a_missing_key_is_refused_by_name() -> None:
    got = entries()
    key = next(k for k, v in got.items() if v == FILES["crlf.txt"])
    del got[key]
    with pytest.raises(SpecError, match=f"lack '{key}' \\(crlf.txt\\)"):
        unpack(got)


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside", "a/../../b", "", "."])
def test_unsafe_paths_are_refused(path: str) -> None:
    got = entries_of(configmap_objects(pack({path: b"x"}, (), 2000)))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="refusing unsafe path"):
        unpack(got)


def test_no_manifest_and_broken_manifest_are_refused() -> None:
    with pytest.raises(SpecError, match="no manifest"):
        unpack({"f0000": b"x"})
    with pytest.raises(SpecError, match="not JSON"):
        unpack({"manifest-000.json": b"{"})
    with pytest.raises(SpecError, match="not one this version writes"):
        unpack({"manifest-000.json": b'{"part": 0}'})


def _configmaps(fan_out: str, max_bytes: int = 900 * 1024) -> list[dict[str, object]]:
    doc = example("fanout")
    doc["spec"]["pipelines"][0]["fanOut"] = fan_out
    tp = parse_pipeline(doc)
    return configmaps(tp, compile_pipeline(tp), Settings(configmap_max_bytes=max_bytes))


def test_configmaps_are_immutable_and_named_by_their_content() -> None:
    """The same repository gets the same names (a resync writes nothing new); a changed one gets new
    names for every part, so a Deployment switches to it in one step and never mounts a mix; so does
    another split of the same files (another size limit)."""
    first, again = _configmaps("router"), _configmaps("router")
    names = [c["metadata"]["name"] for c in first]  # type: ignore[index]
    assert names == [c["metadata"]["name"] for c in again]  # type: ignore[index]
    assert all(c["immutable"] is True for c in first)
    assert all(re.fullmatch(r"vision-repo-[0-9a-f]{10}-\d+", n) for n in names), names
    changed = [c["metadata"]["name"] for c in _configmaps("shared")]  # type: ignore[index]
    assert not set(changed) & set(names)
    split = [c["metadata"]["name"] for c in _configmaps("router", 4000)]  # type: ignore[index]
    assert len(split) > len(names) and not set(split) & set(names)


def test_a_repository_larger_than_a_pipeline_may_generate_is_refused() -> None:
    """Issue 54: a 0.98 MB spec became 8.7 MB of ConfigMaps, and about 200 such fill etcd's 2 GiB. The
    whole generated repository is bounded (TRITONPIPELINE_MAX_GENERATED_BYTES), whatever its split."""
    from tritonpipeline.render.checks import file_size_problems

    artifacts = compile_pipeline(parse_pipeline(example("fanout")))
    total = sum(len(data) for data in artifacts.files.values())
    assert file_size_problems(artifacts, Settings(max_generated_bytes=total)) == []
    (problem,) = file_size_problems(artifacts, Settings(max_generated_bytes=total - 1))
    assert problem.path == "spec"
    assert (
        f"would hold {total} bytes in {len(artifacts.files)} files, more than the {total - 1}"
        in problem.message
    )
    assert "TRITONPIPELINE_MAX_GENERATED_BYTES" in problem.message
