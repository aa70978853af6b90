"""The cluster tutorial (docs/getting-started/cluster.md) and its ready-to-apply examples (examples/cluster/).

The kind run executes the page's blocks as e2e/tutorial.py extracts them; this file checks the extractor
(on small pages, and by running the script it writes with bash and Python), that the page says what the
rest of the repository does (the chart's version and CRDs, the operator's default Triton image, the
rendered Service's ports, the claim and directory the example reads), that each cluster example is the
local one on a cluster (same models and pipelines, on CPU, valid, rendered by `manifests`), and, with a
real tritonserver, that the page's requests get the answers it shows from the example served locally.
Here the pure tests; those on real components are in tests/component/test_tutorial.py."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import release, tutorial
from e2e.tutorial import Block, TutorialError, blocks, script
from helpers import EXAMPLES, MODELS, ROOT
from support.tutorial import PAGE
from tritonpipeline import cli
from tritonpipeline.render.meta import selector_labels
from tritonpipeline.spec import DEFAULT_IMAGE

CLUSTER_EXAMPLES = sorted((EXAMPLES / "cluster").glob("*.yaml"))


CHART_CRDS = ROOT / "charts" / "triton-pipeline" / "crds"


# ------------------------------------------------------------------------------------- the extractor

SAMPLE = """\
# A page

```bash
A=1
echo "one $A"
```

```shell
echo never          # an alternative: shown, not run
```

1. In a list:

   ```python
   print("two")
   ```

```text
## Clean up
(output, not a heading)
```

````bash
echo "three $A"   # a longer fence
````

## Clean up

```console
$ echo never
```

```bash
echo four
```
"""


def test_the_blocks_are_the_bash_and_python_fences_in_order_split_at_clean_up() -> None:
    before, clean_up = blocks(SAMPLE)
    assert before == [
        Block("bash", 'A=1\necho "one $A"\n', 3),
        Block("python", 'print("two")\n', 14),  # the list item's indentation removed
        Block("bash", 'echo "three $A"   # a longer fence\n', 23),
    ]
    assert clean_up == [Block("bash", "echo four\n", 33)]


@pytest.mark.parametrize(
    ("page", "words"),
    [
        ("```bash\necho\n## Clean up\n", "line 1: the ```bash block is never closed"),
        ("```bash\necho\n```\n", "no '## Clean up' heading"),
        ("## Clean up\n\n## Clean up\n", "line 3: a second '## Clean up' heading"),
    ],
)
def test_a_page_that_cannot_run_as_written_is_refused_by_line(page: str, words: str) -> None:
    with pytest.raises(TutorialError, match=re.escape(words)):
        blocks(page)


def _run(text: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", text], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_script_runs_the_blocks_in_one_session_and_python_from_files(tmp_path: Path) -> None:
    before, clean_up = blocks(SAMPLE)
    work = tmp_path / "blocks"
    run = _run(script(before, sys.executable, work, page="sample.md"), tmp_path)
    assert run.returncode == 0, run.stderr
    # each block named before it runs; A set in the first bash block is there in the third
    assert run.stdout.splitlines() == [
        "# sample.md:3",
        "one 1",
        "# sample.md:14",
        "two",
        "# sample.md:23",
        "three 1",
    ]
    assert (work / "block-14.py").read_text() == 'print("two")\n'
    assert _run(script(clean_up, sys.executable, work), tmp_path).stdout == "# cluster.md:33\nfour\n"


@pytest.mark.parametrize(
    "failing",
    [
        "false\necho not reached",
        "echo $UNSET_VARIABLE",  # set -u
        "false | cat",  # set -o pipefail
    ],
)
def test_a_failing_block_stops_the_script_after_naming_it(tmp_path: Path, failing: str) -> None:
    page = f"```bash\necho first\n```\n\n```bash\n{failing}\n```\n\n```bash\necho last\n```\n## Clean up\n"
    run = _run(script(blocks(page)[0], sys.executable, tmp_path), tmp_path)
    assert run.returncode != 0
    assert run.stdout.splitlines()[-1] == "# cluster.md:5", run.stdout


def test_a_failing_python_block_stops_the_script(tmp_path: Path) -> None:
    page = "```python\nraise SystemExit('no answer')\n```\n\n```bash\necho after\n```\n## Clean up\n"
    run = _run(script(blocks(page)[0], sys.executable, tmp_path), tmp_path)
    assert (run.returncode, run.stdout, run.stderr.strip()) == (1, "# cluster.md:1\n", "no answer")


def test_a_python_block_holding_the_heredoc_end_is_refused() -> None:
    (block,) = blocks(f"```python\nx = 1\n{tutorial.PYTHON_END}\n```\n## Clean up\n")[0]
    with pytest.raises(TutorialError, match=r"cluster\.md:1: the Python block contains"):
        script([block], sys.executable, Path("/tmp"))


# ------------------------------------------------------------------------------------------ the page

BEFORE, CLEAN_UP = blocks(PAGE.read_text())


COMMANDS = "".join(b.code for b in BEFORE)


def _first(blocks_: list[Block], text: str) -> int:
    """The index of the first block containing `text` (its absence fails)."""
    found = [n for n, b in enumerate(blocks_) if text in b.code]
    assert found, f"no block of {PAGE.name} contains {text!r}"
    return found[0]


def _heredocs(text: str) -> list[dict[str, Any]]:
    """The objects of every `kubectl apply ... -f - <<'EOF'` heredoc in `text`."""
    docs = re.findall(r"-f - <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    return [d for doc in docs for d in yaml.safe_load_all(doc)]


def test_the_page_states_its_rule_and_has_the_sections_in_order() -> None:
    text = PAGE.read_text()
    rule = text[: text.index("-->")]
    assert text.startswith("<!--") and "```bash" in rule and "```python" in rule and "## Clean up" in rule
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == [
        "Before you start",
        "Install the operator",
        "Put the models on a volume",
        "Apply a pipeline",
        "Send requests",
        "Clean up",
    ]


def test_the_page_goes_from_install_to_an_answer_and_cleans_up_last() -> None:
    steps = [
        "helm install triton-pipeline oci://",
        "helm test triton-pipeline",
        "kubectl create namespace ml",
        "kind: PersistentVolumeClaim",
        "kubectl wait -n ml --for=condition=Ready pod/",
        "kubectl cp model_repository ",
        "kubectl delete -n ml pod/",
        "kubectl apply -n ml -f examples/cluster/fanout.yaml",
        "kubectl wait -n ml --for=condition=Ready tritonpipeline/vision --timeout=15m",
        "kubectl port-forward -n ml service/vision 8000:8000 8001:8001",
        "/v2/models/vision/infer",
        "async_stream_infer",
        'kill "$forward"',
    ]
    order = [_first(BEFORE, step) for step in steps]
    assert order == sorted(order), dict(zip(steps, order, strict=True))
    python = [b for b in BEFORE if b.lang == "python"]
    assert len(python) == 1 and all(w in python[0].code for w in ("httpclient", "grpcclient", "start_stream"))
    cleaning = "".join(b.code for b in CLEAN_UP)
    for step in ("kubectl delete -n ml -f examples/cluster/fanout.yaml", "helm uninstall triton-pipeline"):
        assert step in cleaning and step not in COMMANDS
    assert re.search(r"kubectl delete namespace .*\bml\b", cleaning)


def test_the_page_installs_the_published_chart_at_this_tree_s_version() -> None:
    """The chart reference the release workflow pushes (oci://REGISTRY/OWNER/charts/CHART) at pyproject's
    version; `make release` refuses a version the page does not name (release.version_mentions)."""
    (install,) = re.findall(r"helm install (\S+) (oci://\S+) --version (\S+)", COMMANDS)
    name, chart, version = install
    assert chart == f"oci://ghcr.io/tritonpipeline/charts/{release.CHART_NAME}"
    assert version == release.tree_version()
    assert release.version_mentions()["docs/getting-started/cluster.md helm install --version"] == version
    assert f"helm test {name} --namespace triton-pipeline" in COMMANDS
    assert f"helm uninstall {name} --namespace triton-pipeline" in "".join(b.code for b in CLEAN_UP)
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert '--chart-repo "oci://$REGISTRY/$OWNER/charts"' in workflow


def test_the_models_land_where_the_example_reads_them() -> None:
    """The claim the page creates, the loader's mount and `kubectl cp`'s destination (a directory that
    exists: the source goes inside it, under its own name) make the example's pvc:// uri; the loader runs
    the operator's default Triton image (pulled once for both)."""
    objects = {o["kind"]: o for o in _heredocs(COMMANDS)}
    claim = objects["PersistentVolumeClaim"]["metadata"]["name"]
    pod = objects["Pod"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == DEFAULT_IMAGE
    (volume,) = pod["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim
    (mount,) = container["volumeMounts"]
    copy = re.search(r"kubectl cp (\S+) ml/([\w-]+):(\S+)\n", COMMANDS)
    assert copy is not None, "no kubectl cp to the loader"
    source, pod_name, target = copy.groups()
    assert (pod_name, target) == (pod["metadata"]["name"], mount["mountPath"])
    assert (ROOT / source).is_dir()
    uri = yaml.safe_load((EXAMPLES / "cluster" / "fanout.yaml").read_text())["spec"]["modelRepository"]["uri"]
    assert uri == f"pvc://{claim}/{Path(source).name}"
    listed = f"{mount['mountPath']}/{Path(source).name}"
    assert f"ls {listed} {listed}/extractor/1" in COMMANDS


def test_the_page_forwards_the_ports_the_service_has_and_cleans_up_the_pipeline_s_pods(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["manifests", str(EXAMPLES / "cluster" / "fanout.yaml"), "-n", "ml"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    (service,) = [o for o in objects if o["kind"] == "Service"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert (service["metadata"]["name"], ports["http"], ports["grpc"]) == ("vision", 8000, 8001)
    (instance,) = [f"{k}={v}" for k, v in selector_labels("vision").items() if k.endswith("/instance")]
    assert f"--for=delete pod -l {instance} " in "".join(b.code for b in CLEAN_UP)


def test_the_clean_up_deletes_every_crd_the_chart_installs() -> None:
    names = {
        doc["metadata"]["name"]
        for path in CHART_CRDS.glob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
    }
    (delete,) = [b.code for b in CLEAN_UP if "kubectl delete crd" in b.code]
    assert set(shlex.split(delete.replace("\\\n", " "))[3:]) == names


# -------------------------------------------------------------------------------- the cluster examples


def test_there_are_cluster_examples() -> None:
    assert EXAMPLES / "cluster" / "fanout.yaml" in CLUSTER_EXAMPLES


@pytest.mark.parametrize("path", CLUSTER_EXAMPLES, ids=[p.stem for p in CLUSTER_EXAMPLES])
def test_a_cluster_example_is_the_local_one_on_cpu_from_a_claim(path: Path) -> None:
    """Same models and pipelines as examples/NAME.yaml (the instance groups' kind aside: CPU here), no
    GPU, its models on a claim; and its top says how to run it on GPUs."""
    cluster_doc = yaml.safe_load(path.read_text())
    local_doc = yaml.safe_load((EXAMPLES / path.name).read_text())
    assert cluster_doc["metadata"] == local_doc["metadata"]
    assert cluster_doc["spec"]["pipelines"] == local_doc["spec"]["pipelines"]
    for model in local_doc["spec"]["models"]:
        for group in model.get("instances", []):
            group["kind"] = "CPU"
    assert cluster_doc["spec"]["models"] == local_doc["spec"]["models"]
    assert cluster_doc["spec"]["server"]["gpus"] == 0
    groups = [g for m in cluster_doc["spec"]["models"] for g in m.get("instances", [])]
    assert groups and {g["kind"] for g in groups} == {"CPU"}
    assert cluster_doc["spec"]["modelRepository"]["uri"].startswith("pvc://")
    assert "On GPUs" in path.read_text().split("apiVersion:")[0]


@pytest.mark.parametrize("path", CLUSTER_EXAMPLES, ids=[p.stem for p in CLUSTER_EXAMPLES])
def test_a_cluster_example_validates_with_its_models_and_renders_for_a_cluster(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate` (with the checkout's model_repository/ standing in for the claim: each model's files
    are there) and `manifests`, which refuses a local uri: no GPU requested, every instance on CPU."""
    assert cli.main(["validate", str(path), "--models", str(MODELS)]) == 0
    assert cli.main(["manifests", str(path), "-n", "ml"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert "nvidia.com/gpu" not in json.dumps(deployment)
    configs = "".join(v for o in objects if o["kind"] == "ConfigMap" for v in (o.get("data") or {}).values())
    assert "KIND_CPU" in configs and "KIND_GPU" not in configs
