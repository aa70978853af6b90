"""`make release` (e2e/release.py): the version rule, the re-tagged OCI archives, the chart's values with the
images by digest, SHA256SUMS; and, marked `release_build`, a whole release on real parts (the images built by
buildah, syft, helm, python -m build) checked the way a user would use it.
Here the tests on real components; the pure ones are in tests/unit/test_release.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import release
from harness.gotools import ensure_tool, missing_tool
from harness.helm import CHART, Helm
from harness.registry import serve as registry_serve
from helpers import ROOT
from support.release import _members

# ------------------------------------------------------------------------------------- publishing


def _tiny_release(tmp_path: Path, arch: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A release directory as `make release` on `arch` writes it, with one-layer images (images.json and
    the archives only)."""
    from e2e import images

    monkeypatch.setattr(images, "_arch", lambda: arch)
    version = release.tree_version()
    out = tmp_path / arch
    out.mkdir()
    listed: dict[str, Any] = {}
    for role in ("operator", "assembler"):
        layer = out / "layer.tar"
        with tarfile.open(layer, "w") as tar:
            info = tarfile.TarInfo(f"{role}-{arch}")
            info.size = len(arch)
            tar.addfile(info, io.BytesIO(arch.encode()))
        built = images.write_oci_archive("x.local/y:z", [layer], {}, out / "built.oci.tar", role)
        repo = "registry.example/tp/operator" + ("-assembler" if role == "assembler" else "")
        listed[role] = release.export_image(
            built, repo, version, out / f"{role}-{version}-linux-{arch}.oci.tar"
        )
        built.unlink()
        layer.unlink()
    monkeypatch.undo()
    (out / "images.json").write_text(json.dumps({"version": version, "images": listed}))
    return out


@pytest.mark.helm
def test_publish_pushes_each_platform_by_digest_then_one_index_and_the_chart_pulls_by_its_digest(
    tmp_path: Path, helm_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the release workflow runs after `make release` on an amd64 and an arm64 runner: `publish` of
    both directories into a real registry (go-containerregistry's, built from Go modules): each platform's
    image under its own digest, one image index tagged VERSION naming both, and the chart, pushed as an OCI
    artifact, rendering the index by digest when helm pulls it from the registry."""
    if why := missing_tool("crane"):
        pytest.skip(why)
    crane = ensure_tool("crane")
    dirs = [_tiny_release(tmp_path, arch, monkeypatch) for arch in ("amd64", "arm64")]
    version = release.tree_version()
    with registry_serve(crane, tmp_path) as registry:
        repo = f"{registry}/tp/operator"
        published = release.publish(dirs, tmp_path / "out", f"oci://{registry}/charts", repo, plain_http=True)
        for role, image_repo in (("operator", repo), ("assembler", f"{repo}-assembler")):
            entry = published["images"][role]
            built = {arch: json.loads((d / "images.json").read_text())["images"][role]["digest"]
                     for arch, d in zip(("amd64", "arm64"), dirs, strict=True)}  # fmt: skip
            assert entry["platforms"] == {f"linux/{a}": d for a, d in built.items()}
            index_bytes = subprocess.run(
                [str(crane), "manifest", "--insecure", f"{image_repo}:{version}"],
                capture_output=True,
                check=True,
            ).stdout
            assert entry["digest"] == "sha256:" + hashlib.sha256(index_bytes).hexdigest()
            index = json.loads(index_bytes)
            assert {(m["platform"]["architecture"], m["digest"]) for m in index["manifests"]} == set(
                built.items()
            )
            assert entry["reference"] == f"{image_repo}@{entry['digest']}"
        helm = Helm(helm_binary, tmp_path / "helm-home")
        text = helm.run(
            "template", "tp", f"oci://{registry}/charts/triton-pipeline", "--version", version, "--plain-http"
        ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == published["images"]["operator"]["reference"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TRITONPIPELINE_ASSEMBLER_IMAGE"] == published["images"]["assembler"]["reference"]
    assert published["chart"]["reference"] == f"oci://{registry}/charts/triton-pipeline"
    assert json.loads((tmp_path / "out" / "published.json").read_text()) == published


# ------------------------------------------------------------------------------------- a whole release


def _why_no_release() -> str | None:
    if os.geteuid() != 0:
        return "not root: e2e/images.py's debootstrap and buildah need root here"
    for cmd in ("buildah", "debootstrap"):
        if shutil.which(cmd) is None and not Path(f"/usr/sbin/{cmd}").exists():
            return f"{cmd} is not installed (apt-get install {cmd})"
    return missing_tool("syft") or missing_tool("helm")


def _tree_mentions(text: str) -> list[str]:
    """The files of the tree's chart that mention `text` (a digest the release set: in a copy, never here)."""
    return [str(p) for p in CHART.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


@pytest.mark.release_build
@pytest.mark.helm
@pytest.mark.timeout(1800)
def test_a_release_installs_renders_by_digest_lists_its_packages_and_verifies(
    tmp_path: Path, helm_binary: Path
) -> None:
    """`python -m e2e.release VERSION` (what `make release` runs) into a temporary directory, then used as a
    user would: the wheel in a fresh venv (and by pipx where it is installed) says the version; the chart
    package renders with `helm template` the operator image by the digest images.json gives, which is the
    sha256 of the archive's manifest; the SBOM lists the image's Python and Debian packages; SHA256SUMS
    verifies. The tree's chart never held the digests."""
    why = _why_no_release()
    if why:
        pytest.skip(why)
    version = release.tree_version()
    out = tmp_path / "release"
    proc = subprocess.run(
        [sys.executable, "-m", "e2e.release", version, "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1700,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-5000:]
    for step in (
        "images done in",
        "sbom: operator-",
        "chart: triton-pipeline-",
        "python: tritonpipeline-",
        "SHA256SUMS:",
    ):
        assert step in proc.stdout, step  # progress for every long step

    # SHA256SUMS lists every file and verifies
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    assert sorted(line.split(": ")[0] for line in sums.stdout.splitlines()) == sorted(
        p.name for p in out.iterdir() if p.name != "SHA256SUMS"
    )

    # images.json: each digest is the sha256 of the manifest its archive's index names, tagged VERSION
    listed = json.loads((out / "images.json").read_text())
    assert listed["version"] == version and listed["built"] == [release.host_platform()]
    assert set(listed["not_built"]) == set(release.PLATFORMS) - {release.host_platform()}
    images = listed["images"]
    for role in ("operator", "assembler"):
        files = _members(out / images[role]["archive"])
        (desc,) = json.loads(files["index.json"])["manifests"]
        manifest = files[f"blobs/sha256/{desc['digest'][7:]}"]
        assert images[role]["digest"] == desc["digest"] == "sha256:" + hashlib.sha256(manifest).hexdigest()
        assert desc["annotations"]["org.opencontainers.image.ref.name"] == version
        assert desc["annotations"]["io.containerd.image.name"] == f"{images[role]['repository']}:{version}"
    assert images["assembler"]["repository"] == images["operator"]["repository"] + "-assembler"
    # the chart was packaged from a copy, and the version was not rewritten anywhere
    assert _tree_mentions(images["operator"]["digest"]) == [] and release.tree_version() == version

    # the chart package: version and appVersion, and both images by digest as what it renders by default
    helm = Helm(helm_binary, tmp_path / "helm-home")
    package = out / f"triton-pipeline-{version}.tgz"
    chart = yaml.safe_load(helm.run("show", "chart", str(package)).stdout)
    assert (chart["version"], chart["appVersion"]) == (version, version)
    docs = [d for d in yaml.safe_load_all(helm.run("template", "tp", str(package), "-n", "ops").stdout) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == images["operator"]["reference"]
    assert container["image"] == f"{images['operator']['repository']}@{images['operator']['digest']}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TRITONPIPELINE_ASSEMBLER_IMAGE"] == images["assembler"]["reference"]

    # the SBOM: SPDX of the operator image, with its Python packages (kopf, the wheel itself) and Debian's
    spdx = json.loads((out / f"operator-{version}.spdx.json").read_text())
    assert spdx["spdxVersion"].startswith("SPDX-2.") and spdx["name"] == images["operator"]["repository"]
    packages = {p["name"]: p.get("versionInfo") for p in spdx["packages"]}
    assert packages["tritonpipeline"] == version
    assert {"kopf", "kubernetes", "python3.11", "libc6"} <= set(packages)
    purls = {r["referenceLocator"].split("@")[0] for p in spdx["packages"] for r in p.get("externalRefs", [])
             if r["referenceType"] == "purl"}  # fmt: skip
    assert "pkg:pypi/kopf" in purls and any(p.startswith("pkg:deb/debian/python3.11") for p in purls)
    assembler = {
        p["name"] for p in json.loads((out / f"assembler-{version}.spdx.json").read_text())["packages"]
    }
    assert "boto3" in assembler and "kopf" not in assembler  # the assembler image has no operator stack

    # the wheel: a fresh venv (this Python, no access to the tree) installs it and runs the CLI
    wheel = out / f"tritonpipeline-{version}-py3-none-any.whl"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    said = subprocess.run([str(venv / "bin" / "tritonpipeline"), "--version"], capture_output=True, text=True)
    assert said.stdout.strip() == f"tritonpipeline {version}", said
    if shutil.which("pipx"):  # make system-deps installs Debian's
        homes = {"PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "pipx-bin")}
        pipx_env = {**os.environ, **homes}
        pipx = subprocess.run(
            ["pipx", "install", str(wheel)], capture_output=True, text=True, env=pipx_env, timeout=600
        )
        assert pipx.returncode == 0, pipx.stdout + pipx.stderr
        said = subprocess.run(
            [str(tmp_path / "pipx-bin" / "tritonpipeline"), "--version"], capture_output=True, text=True
        )
        assert said.stdout.strip() == f"tritonpipeline {version}", said
    # passed: the 300 MB of archives need not stay in pytest's kept temporary directories
    for archive in out.glob("*.oci.tar"):
        archive.unlink()


# ------------------------------------------------------------------------------------- the workflow

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


@pytest.mark.linters
def test_the_release_workflow_passes_actionlint_which_finds_a_broken_one(tmp_path: Path) -> None:
    """.github/workflows/release.yml cannot run here: actionlint (built from Go modules; shellcheck checks
    its scripts where Debian's is installed) lints it, and does find a wrong expression and an unquoted
    variable in a copy. It builds on a tag v*, runs e2e/release.py, and signs with cosign keyless."""
    if why := missing_tool("actionlint"):
        pytest.skip(why)
    actionlint = ensure_tool("actionlint")
    run = [str(actionlint), "-no-color"]
    done = subprocess.run([*run, str(WORKFLOW)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = WORKFLOW.read_text()
    broken = tmp_path / "release.yml"
    broken.write_text(text.replace("steps.version.outputs.version }}", "steps.versoin.outputs.version }}", 1))
    found = subprocess.run([*run, str(broken)], capture_output=True, text=True)
    assert found.returncode == 1 and 'property "versoin" is not defined' in found.stdout, found.stdout
    if shutil.which("shellcheck"):
        broken.write_text(text.replace("--out publish\n", "--out $REGISTRY/publish\n", 1))
        found = subprocess.run([*run, str(broken)], capture_output=True, text=True)
        assert found.returncode == 1 and "SC2086" in found.stdout, found.stdout

    workflow = yaml.safe_load(text)
    assert workflow[True]["push"] == {"tags": ["v*"]}  # YAML 1.1 reads the key `on` as True
    steps = [s.get("run", "") for job in workflow["jobs"].values() for s in job["steps"]]
    assert any('python -m e2e.release "$VERSION"' in s for s in steps)
    assert any("python -m e2e.release publish" in s for s in steps)
    assert any("cosign sign --yes" in s for s in steps)
    assert workflow["jobs"]["publish"]["permissions"] == {
        "contents": "write", "packages": "write", "id-token": "write"
    }  # fmt: skip
    assert {m["arch"] for m in workflow["jobs"]["build"]["strategy"]["matrix"]["include"]} == {
        "amd64",
        "arm64",
    }
