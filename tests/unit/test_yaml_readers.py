"""YAML as kubectl reads it (go-yaml through sigs.k8s.io/yaml), on both sides: what the project writes
(manifests, imported pipelines) quotes every string such a reader takes for a boolean, a null or a
number, and what `validate` reads, it reads as kubectl does, so a file valid here is valid for the
cluster. Pure: the expectations are YAML 1.1's booleans and YAML 1.2's numbers, written out below."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import EXAMPLES, example
from tritonpipeline import cli, yamltext
from tritonpipeline.errors import SpecError
from tritonpipeline.spec import parse_text
from tritonpipeline.spec.document import MAX_FILE_BYTES, load_file
from tritonpipeline.spec.yaml_reader import load_documents

# what go-yaml reads as no string, written plain: y and n (YAML 1.1), numbers with an exponent, a base
# prefix or `_` (YAML 1.2), nulls; each needs quotes
READ_OTHERWISE = ["y", "Y", "n", "N", "yes", "No", "on", "OFF", "true", "~", "null", "1e-05", "1e3", "0x1F",
                  "1_000", "5", "-2", "1.5", ".5"]  # fmt: skip
# strings every reader reads as strings
PLAIN = ["hello", "IMAGE", "Y0", "yy", "1.5Gi", "100m", "nvidia.com/gpu", "v1", "e5", "1e", "0xZ"]


@pytest.mark.parametrize("text", READ_OTHERWISE)
def test_a_string_another_reader_reads_otherwise_is_quoted(text: str) -> None:
    assert yamltext.dump({"k": text}) == f"k: '{text}'\n"
    assert load_documents(yamltext.dump({"k": text})) == [{"k": text}]


@pytest.mark.parametrize("text", PLAIN)
def test_a_plain_string_stays_plain(text: str) -> None:
    assert yamltext.dump({"k": text}) == f"k: {text}\n"
    assert load_documents(yamltext.dump({"k": text})) == [{"k": text}]


@pytest.mark.parametrize(
    ("plain", "read"),
    [("y", True), ("N", False), ("off", False), ("1e3", 1000.0), ("-1.5e-2", -0.015), ("0x10", 16),
     ("1:20", "1:20"), ("2024-01-01", "2024-01-01"), ("1.5Gi", "1.5Gi"), ("~", None)],
)  # fmt: skip
def test_plain_scalars_are_read_as_kubectl_reads_them(plain: str, read: object) -> None:
    """PyYAML alone reads y as 'y', 1e3 as '1e3', 1:20 as 80 and 2024-01-01 as a date."""
    ((value,),) = [list(d.values()) for d in load_documents(f"k: {plain}\n")]
    assert value == read and type(value) is type(read)


def test_a_tensor_named_y_unquoted_is_refused_as_kubectl_refuses_it() -> None:
    text = (EXAMPLES / "diamond.yaml").read_text()
    with pytest.raises(SpecError) as info:
        parse_text(text.replace("name: IMAGE,", "name: y,", 1))
    (problem,) = info.value.problems
    assert problem.path == "spec.pipelines[0].inputs[0].name"
    assert problem.message.startswith(
        "expected a string, got a boolean True (YAML, kubectl's too, reads a plain y"
    )
    assert parse_text(text.replace("name: IMAGE,", "name: 'y',", 1))  # quoted: a name


@pytest.mark.parametrize("key", ["? [a]\n  : 1", "? {a: 1}\n  : 1"])
def test_a_mapping_key_that_is_no_string_is_refused_at_its_line(key: str) -> None:
    with pytest.raises(SpecError) as info:
        load_documents(f"spec:\n  {key}\n")
    (problem,) = info.value.problems
    assert problem.path == "line 2, column 5"
    assert "a mapping key must be a string (a field name), got a " in problem.message


def test_manifests_of_a_pipeline_named_y_read_back_as_strings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its labels and names are `y`: written plain, kubectl refused them ("cannot unmarshal bool")."""
    doc = example("fanout", uri="pvc://models/triton")
    doc["metadata"]["name"] = "y"
    path = tmp_path / "p.yaml"
    path.write_text(yamltext.dump(doc))
    assert cli.main(["manifests", str(path)]) == 0
    objects = load_documents(capsys.readouterr().out)
    labels = [v for o in objects for v in o["metadata"].get("labels", {}).values()]
    assert "y" in labels and all(isinstance(v, str) for v in labels)
    assert all(isinstance(o["metadata"]["name"], str) for o in objects)


def test_a_number_as_a_key_is_its_text_and_a_boolean_key_is_refused() -> None:
    """kubectl (sigs.k8s.io/yaml) makes a number key a string, so a step maps an ONNX input named 1519
    unquoted; it makes `n:` the key "false", which nobody means: quoted, it is n."""
    assert load_documents("inputs:\n  1519: inputs.X\n  2.5: a\n") == [
        {"inputs": {"1519": "inputs.X", "2.5": "a"}}
    ]
    with pytest.raises(SpecError) as info:
        load_documents("parameters:\n  n: 1\n")
    ((path, message),) = [(p.path, p.message) for p in info.value.problems]
    assert path == "line 2, column 3" and message.endswith(
        "the key 'n' is read as a boolean, by kubectl too: quote it"
    )
    assert load_documents("parameters:\n  'n': 1\n") == [{"parameters": {"n": 1}}]


def test_a_parameter_json_cannot_hold_is_refused() -> None:
    text = (
        (EXAMPLES / "diamond.yaml")
        .read_text()
        .replace("backend: python", "backend: python\n      parameters: {p: .nan}", 1)
    )
    with pytest.raises(SpecError) as info:
        parse_text(text)
    ((path, message),) = [(p.path, p.message) for p in info.value.problems]
    assert path.endswith(".parameters") and "must be a finite number" in message


def test_values_nested_too_deeply_are_one_clear_error(tmp_path: Path) -> None:
    """500 lists inside one another ended in 'unexpected RecursionError' without a file or line, and
    `validate --output json` printed no JSON."""
    path = tmp_path / "deep.yaml"
    path.write_text("apiVersion: serving.tritonpipeline.io/v1alpha1\nkind: TritonPipeline\n"
                    "metadata: {name: deep, annotations: {x: " + "[" * 500 + "]" * 500 + "}}\n")  # fmt: skip
    with pytest.raises(SpecError) as info:
        load_file(path)
    ((where, message),) = [(p.path, p.message) for p in info.value.problems]
    assert where == "" and message.startswith("invalid YAML: values nested more deeply than can be read")
    assert info.value.source == str(path)


def test_a_file_larger_than_any_pipeline_is_refused_unread(tmp_path: Path) -> None:
    """/dev/zero grew validate to 6.6 GB in 5 s; a file is read up to MAX_FILE_BYTES, then refused."""
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    for path in (big, Path("/dev/zero")):
        with pytest.raises(SpecError) as info:
            load_file(path)
        assert "file is larger than 8 MiB" in info.value.problems[0].message


@pytest.mark.parametrize(
    ("metadata", "path", "words"),
    [
        ({"labels": {"team": ["a"]}}, "metadata.labels.team", "expected a string, got a list"),
        ({"labels": {"bad label!": "x"}}, "metadata.labels.bad label!", "invalid label key"),
        ({"labels": {"team": "a b"}}, "metadata.labels.team", "invalid label value"),
        ({"annotations": {"x": {"z": 1}}}, "metadata.annotations.x", "expected a string, got a mapping"),
        ({"annotations": {"x": "y" * (256 * 1024)}}, "metadata.annotations", "Kubernetes allows 262144"),
        ({"bogus": 1}, "metadata.bogus", "unknown field 'bogus' of metadata"),
    ],
)
def test_metadata_is_checked_as_the_apiserver_checks_it(metadata: dict, path: str, words: str) -> None:
    """`validate` said valid; kubectl apply was refused (labels and annotations are maps of strings,
    label keys and values have a grammar, annotations 256 KiB in all, ObjectMeta has no field 'bogus')."""
    doc = example("fanout")
    doc["metadata"].update(metadata)
    with pytest.raises(SpecError) as info:
        parse_text(yaml.safe_dump(doc))
    assert [(p.path, words in p.message) for p in info.value.problems] == [(path, True)], info.value.problems


def test_metadata_as_kubectl_get_prints_it_is_taken() -> None:
    doc = example("fanout")
    doc["metadata"].update(
        uid="0b1c", resourceVersion="42", generation=3, creationTimestamp="2026-11-28T00:00:00Z",
        labels={"app.kubernetes.io/name": "fanout"}, annotations={"note": "any text: {}"},
        managedFields=[{"manager": "kubectl"}], finalizers=[], ownerReferences=[],
    )  # fmt: skip
    (tp,) = parse_text(yaml.safe_dump(doc))
    assert tp.metadata.labels == {"app.kubernetes.io/name": "fanout"}


def test_a_file_that_is_no_kubernetes_object_is_one_line() -> None:
    """Issue 55: the chart's values.yaml given to `validate` got 33 "unknown field" lines. A document
    with none of apiVersion, kind and spec is one problem naming its first keys; a TritonPipeline that
    lacks only some of them still gets each named."""
    values = (EXAMPLES.parent / "charts" / "triton-pipeline" / "values.yaml").read_text()
    with pytest.raises(SpecError) as info:
        parse_text(values, "values.yaml")
    (problem,) = info.value.problems
    assert problem.message.startswith("not a TritonPipeline: no apiVersion, kind or spec at the top")
    first = list(yaml.safe_load(values))[:2]
    assert f"(its keys: {first[0]}, {first[1]}," in problem.message and " more); is this" in problem.message

    pipeline = yaml.safe_dump(example("fanout"))
    with pytest.raises(SpecError) as info:
        parse_text(pipeline + "---\nreplicas: 2\nimage: x\n", "two.yaml")
    (problem,) = info.value.problems
    assert problem.path == "document 2"
    assert problem.message.endswith("(its keys: replicas, image); is this the right file?")

    unlabelled = example("fanout")
    del unlabelled["apiVersion"]
    with pytest.raises(SpecError) as info:
        parse_text(yaml.safe_dump(unlabelled), "p.yaml")
    assert [p.path for p in info.value.problems] == ["apiVersion"]
