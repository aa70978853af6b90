"""A release: `make release VERSION=X.Y.Z` writes into dist/release/X.Y.Z/

    operator-X.Y.Z-linux-ARCH.oci.tar    the operator image (the Dockerfile built by e2e/images.py's buildah
    assembler-X.Y.Z-linux-ARCH.oci.tar   machinery: the same cached archives `make e2e` loads), tagged X.Y.Z
    images.json                          each image's repository, tag and manifest digest (sha256 of its OCI
                                         manifest), its platform, and the platforms not built and why
    triton-pipeline-X.Y.Z.tgz            the chart (`helm package` of a copy: the tree's chart is untouched),
                                         version and appVersion X.Y.Z, both images by digest as its defaults
    tritonpipeline-X.Y.Z-py3-none-any.whl  the CLI (`pip install` / `pipx install` the file), and its sdist
    tritonpipeline-X.Y.Z.tar.gz
    operator-X.Y.Z.spdx.json             SBOMs (SPDX 2.3 JSON) of both images, by syft (built from Go modules,
    assembler-X.Y.Z.spdx.json            e2e/build-gotool.sh) scanning the OCI archives
    SHA256SUMS                           over every file above (`sha256sum -c SHA256SUMS`)

The version rule: pyproject.toml's [project] version is the release version. A VERSION that differs is
refused in one line, before anything is built: the wheel and the image's `tritonpipeline --version` say
pyproject's version, and the image is the one built from this tree (and tested by `make e2e`), so a release
never rewrites a version. Cutting X.Y.Z: set it in pyproject.toml and the chart's appVersion (a test checks
they are equal), commit, tag vX.Y.Z, `make release VERSION=X.Y.Z` (the release workflow does the same on
the tag).

Images are built for this host's architecture only: e2e/images.py debootstraps its Debian base natively
and buildah runs the Dockerfile's RUN steps (pip, gcc) natively. images.json says which other platforms
were not built and why (here: no binfmt_misc handler runs arm64 binaries); .github/workflows/release.yml
builds arm64 on an arm64 runner and pushes both as one image index.

    python -m e2e.release X.Y.Z [--out DIR] [--repository REPO]
    python -m e2e.release publish DIR [DIR...] --chart-repo oci://REGISTRY/PATH --out DIR [--plain-http]
    python -m e2e.release sums DIR

`publish` pushes the images of releases of one version (one directory per platform) by digest, as one
image index per image where there are several platforms, then packages the chart with the digests pushed
and `helm push`es it; it writes published.json (the references and digests to sign). The release
workflow runs it, then cosign; tests/component/test_release.py runs it against a registry of its own. `sums`
rewrites DIR/SHA256SUMS.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "triton-pipeline"
CHART_NAME = "triton-pipeline"
DIST = ROOT / "dist" / "release"
# plain X.Y.Z: the same string is a Python version (PEP 440), a chart version (SemVer) and an image tag
VERSION_RE = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
SUMS = "SHA256SUMS"
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
# the platforms a release is for; those this host cannot build are listed in images.json with the reason
PLATFORMS = ("linux/amd64", "linux/arm64")
# the Deployment's container and the variable naming the init container image (charts/.../deployment.yaml)
OPERATOR_CONTAINER = "operator"
ASSEMBLER_ENV = "TRITONPIPELINE_ASSEMBLER_IMAGE"
# `helm install NAME oci://.../charts/triton-pipeline --version X.Y.Z` as the docs write it (version_mentions)
PUBLISHED_INSTALL = re.compile(rf"oci://\S+/charts/{CHART_NAME}\s+(?:\\\n\s*)?--version\s+(\S+)")


class ReleaseError(RuntimeError):
    """The release cannot be made: one line, printed after `error:`."""


def log(msg: str) -> None:
    print(f">> release: {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------
# the version


def tree_version() -> str:
    """pyproject.toml's [project] version: the release version."""
    text = (ROOT / "pyproject.toml").read_text()
    project = text.split("\n[project]\n", 1)[-1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', project, re.MULTILINE)
    if found is None:
        raise ReleaseError("pyproject.toml: no version in [project]")
    return found.group(1)


def check_version(version: str) -> str:
    """`version` when it may be released from this tree, else ReleaseError (one line)."""
    have = tree_version()
    if not version:
        raise ReleaseError(
            f"make release needs VERSION=X.Y.Z (this tree's version, pyproject.toml's, is {have})"
        )
    if not VERSION_RE.fullmatch(version):
        raise ReleaseError(f"VERSION {version!r} is not X.Y.Z (three numbers, no leading zeros, no suffix)")
    if version != have:
        raise ReleaseError(
            f'VERSION {version} is not this tree\'s version {have}: set version = "{version}" in '
            f"pyproject.toml and appVersion in {CHART.relative_to(ROOT)}/Chart.yaml, commit, then release"
        )
    stale = [where for where, said in version_mentions().items() if said != version]
    if stale:
        raise ReleaseError(
            f"pyproject.toml says {version} but not {' nor '.join(stale)}: set them, commit, then release"
        )
    return version


def version_mentions() -> dict[str, str]:
    """The other places that name the version, and what each says: the chart's appVersion, the
    operator's default assembler image tag, and the published chart's version that the cluster tutorial
    and README install (tests check they agree with pyproject.toml)."""
    import yaml

    from tritonpipeline.settings import DEFAULT_ASSEMBLER_IMAGE

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    mentions = {
        f"{CHART.relative_to(ROOT)}/Chart.yaml appVersion": str(chart.get("appVersion", "")),
        "operator/tritonpipeline/settings.py DEFAULT_ASSEMBLER_IMAGE": DEFAULT_ASSEMBLER_IMAGE.rpartition(
            ":"
        )[2],
    }
    for page in (ROOT / "docs" / "getting-started" / "cluster.md", ROOT / "README.md"):
        said = sorted(set(PUBLISHED_INSTALL.findall(page.read_text())))
        # none found, or two that differ: named as found (a test and check_version then say so)
        mentions[f"{page.relative_to(ROOT)} helm install --version"] = (
            said[0] if len(said) == 1 else f"{len(said)} versions: {said}"
        )
    return mentions


def source_state() -> dict[str, Any]:
    """The commit released and whether the work tree differed from it (recorded, not refused)."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


# ---------------------------------------------------------------------------------------------------
# the images


def host_platform() -> str:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"linux/{arch}"


def why_not_built(target: str, binfmt: Path = Path("/proc/sys/fs/binfmt_misc")) -> str:
    """Why `target` (linux/arm64, linux/amd64) is not built on this host, in one sentence."""
    arch = target.split("/")[1]
    qemu = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}.get(arch, f"qemu-{arch}")
    native = "e2e/images.py builds the host's architecture only (its Debian base is debootstrapped natively, "
    native += "and the Dockerfile's RUN steps, pip and gcc, run natively)"
    elsewhere = f"the release workflow builds {arch} on an {arch} runner"
    if not (binfmt / "register").exists():
        return (
            f"{native}; this host cannot run {arch} binaries at all: binfmt_misc is not mounted at {binfmt} "
            f"and no {qemu} handler is registered (Debian's qemu-user-static + binfmt-support); {elsewhere}"
        )
    handler = binfmt / qemu
    if not handler.exists() or "enabled" not in handler.read_text():
        return f"{native}; no {qemu} handler is registered in {binfmt}; {elsewhere}"
    return f"{native}, although {binfmt}/{qemu} is registered; {elsewhere}"


def _member_bytes(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    if f is None:
        raise ReleaseError(f"{tar.name}: no {name}")
    return f.read()


def export_image(archive: Path, repository: str, version: str, out: Path) -> dict[str, Any]:
    """Copy the OCI archive `archive` to `out` tagged `version` (index.json's annotations: the tag and
    REPOSITORY:VERSION, with the platform from the image config). Only index.json changes, so the
    manifest, and its digest, are the ones built. Returns the image's entry of images.json."""
    with tarfile.open(archive) as src:
        index = json.loads(_member_bytes(src, "index.json"))
        if len(index["manifests"]) != 1:
            raise ReleaseError(f"{archive}: {len(index['manifests'])} manifests, expected one image")
        desc = index["manifests"][0]
        digest = desc["digest"]
        manifest_bytes = _member_bytes(src, f"blobs/sha256/{digest.removeprefix('sha256:')}")
        if (
            "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() != digest
            or len(manifest_bytes) != desc["size"]
        ):
            raise ReleaseError(f"{archive}: the manifest does not match its digest {digest}")
        config_digest = json.loads(manifest_bytes)["config"]["digest"]
        config = json.loads(_member_bytes(src, f"blobs/sha256/{config_digest.removeprefix('sha256:')}"))
        plat = {"architecture": config["architecture"], "os": config["os"]}
        plat |= {"variant": config["variant"]} if config.get("variant") else {}
        desc = {
            "mediaType": desc.get("mediaType", "application/vnd.oci.image.manifest.v1+json"),
            "digest": digest,
            "size": desc["size"],
            "platform": plat,
            "annotations": {
                "io.containerd.image.name": f"{repository}:{version}",
                "org.opencontainers.image.ref.name": version,
            },
        }
        new_index = json.dumps(
            {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [desc]},
            sort_keys=True,
        ).encode()
        tmp = out.with_suffix(".part")
        with tarfile.open(tmp, "w") as dst:
            for member in src.getmembers():
                if member.name == "index.json":
                    info = tarfile.TarInfo("index.json")
                    info.size, info.mode = len(new_index), 0o644
                    dst.addfile(info, io.BytesIO(new_index))
                else:
                    dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    tmp.rename(out)
    return {
        "repository": repository,
        "tag": version,
        "digest": digest,
        "reference": f"{repository}@{digest}",
        "platform": f"{plat['os']}/{plat['architecture']}",
        "archive": out.name,
    }


def build_images(
    version: str, repository: str, out: Path, built: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The operator and assembler images (e2e/images.py: built, or found in its cache; or `built`, the
    images a caller built already) exported into `out`; images.json's content."""
    from e2e.images import ImageError, assembler_image, base_image, operator_image

    t = time.monotonic()
    if built is None:
        log("images: the Dockerfile's operator and assembler targets through e2e/images.py (cached by "
            "content; cold: a Debian debootstrap and two buildah builds, several minutes)")  # fmt: skip
        try:
            base = base_image()
            built = {"operator": operator_image(base), "assembler": assembler_image(base)}
        except ImageError as err:
            raise ReleaseError(f"the images could not be built: {err}") from err
    here = host_platform()
    images: dict[str, Any] = {}
    for role, image in built.items():
        repo = repository if role == "operator" else assembler_repository(repository)
        name = f"{role}-{version}-{here.replace('/', '-')}.oci.tar"
        log(f"  {role}: {image.archive.name} -> {name}")
        images[role] = export_image(image.archive, repo, version, out / name)
        log(f"  {role}: {images[role]['reference']} ({images[role]['platform']})")
    not_built = {p: why_not_built(p) for p in PLATFORMS if p != here}
    for p, why in not_built.items():
        log(f"  {p} not built: {why}")
    log(f"images done in {time.monotonic() - t:.0f}s")
    return {"built": [here], "not_built": not_built, "images": images}


# ---------------------------------------------------------------------------------------------------
# the chart


def assembler_repository(repository: str) -> str:
    """The assembler image's repository beside the operator's (the chart's default naming)."""
    from e2e.images import assembler_of

    return assembler_of(f"{repository}:tag").rpartition(":")[0]


def set_chart_images(values: str, repository: str, digest: str, assembler: str) -> str:
    """values.yaml's text with image.repository, image.digest and assemblerImage set, comments kept."""
    lines = values.splitlines(keepends=True)
    done = {"repository": 0, "digest": 0, "assemblerImage": 0}
    in_image = False
    for i, line in enumerate(lines):
        if line[:1] not in ("", " ", "#", "\n"):
            in_image = line.startswith("image:")
        if line.startswith("assemblerImage:"):
            lines[i] = f"assemblerImage: {json.dumps(assembler)}\n"
            done["assemblerImage"] += 1
        for key, value in (("repository", repository), ("digest", digest)):
            if in_image and line.startswith(f"  {key}:"):
                lines[i] = f"  {key}: {json.dumps(value)}\n"
                done[key] += 1
    wrong = [key for key, n in done.items() if n != 1]
    if wrong:
        raise ReleaseError(
            f"{CHART.relative_to(ROOT)}/values.yaml: expected one line each of {', '.join(wrong)}"
        )
    return "".join(lines)


def set_chart_image_annotation(chart: str, values: str) -> str:
    """Chart.yaml's text with Artifact Hub's images annotation naming the images `values` (values.yaml's
    text) runs by default: in the packaged chart, both by digest (tools/chart_annotations.py, which
    `make generate` writes the tree's with)."""
    import yaml

    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import chart_annotations

    app_version = str(yaml.safe_load(chart)["appVersion"])
    images = chart_annotations.images(yaml.safe_load(values), app_version)
    return chart_annotations.set_annotation(chart, chart_annotations.IMAGES, images)


def package_chart(version: str, repository: str, digests: dict[str, str], out: Path) -> Path:
    """`helm package` of a copy of the chart: version and appVersion `version`, the operator image and the
    assembler image by digest as the defaults; checked with helm lint --strict and helm template."""
    from harness.helm import Helm

    t = time.monotonic()
    for role, digest in digests.items():
        if not DIGEST_RE.fullmatch(digest):
            raise ReleaseError(f"the {role} image's digest {digest!r} is not sha256:<64 hex digits>")
    assembler = f"{assembler_repository(repository)}@{digests['assembler']}"
    log(f"chart: packaging {CHART_NAME} {version} with {repository}@{digests['operator']} and {assembler}")
    with tempfile.TemporaryDirectory(prefix="tp-release-chart-") as tmp:
        copy = Path(tmp) / CHART_NAME
        shutil.copytree(CHART, copy)
        values = copy / "values.yaml"
        values.write_text(set_chart_images(values.read_text(), repository, digests["operator"], assembler))
        chart = copy / "Chart.yaml"
        chart.write_text(set_chart_image_annotation(chart.read_text(), values.read_text()))
        helm = Helm(_tool("helm"), Path(tmp) / "helm-home")
        helm.run("lint", "--strict", str(copy))
        helm.run(
            "package", str(copy), "--version", version, "--app-version", version, "--destination", str(out)
        )
        package = out / f"{CHART_NAME}-{version}.tgz"
        if not package.exists():
            raise ReleaseError(f"helm package wrote no {package.name}")
        image, env = rendered_images(helm, package)
        if image != f"{repository}@{digests['operator']}" or env != assembler:
            raise ReleaseError(f"the packaged chart renders image {image} and assembler {env}")
        listed = listed_images(helm, package)
        if listed != [image, env]:
            raise ReleaseError(f"the packaged chart lists {listed} for Artifact Hub, not {image}, {env}")
    log(f"chart: {package.name} in {time.monotonic() - t:.0f}s (renders {image})")
    return package


def listed_images(helm: Any, package: Path) -> list[str]:
    """The images the packaged chart's Chart.yaml lists for Artifact Hub (`helm show chart`)."""
    import yaml

    chart = yaml.safe_load(helm.run("show", "chart", str(package)).stdout)
    return [str(i["image"]) for i in yaml.safe_load(chart["annotations"]["artifacthub.io/images"])]


def rendered_images(helm: Any, package: Path) -> tuple[str, str]:
    """The operator Deployment's image and its assembler image variable, as `helm template` renders the
    packaged chart with its defaults."""
    import yaml

    text = helm.run("template", "release", str(package), "--namespace", "tritonpipeline-system").stdout
    (deployment,) = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "Deployment"]
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == OPERATOR_CONTAINER
    ]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    return container["image"], env[ASSEMBLER_ENV]


# ---------------------------------------------------------------------------------------------------
# the wheel, the SBOM, the sums


# what the Dockerfile builds its wheel from (COPY pyproject.toml README.md ./, COPY operator/)
PYTHON_SOURCES = ("pyproject.toml", "README.md", "operator")


def build_python(version: str, out: Path) -> list[Path]:
    """sdist, then the wheel from the sdist (`python -m build`, isolated: setuptools from the index as in
    the Dockerfile), into `out`; from a copy of what the Dockerfile builds its wheel from, so nothing is
    written into the tree (the egg-info)."""
    t = time.monotonic()
    log("python: sdist and wheel (python -m build: the wheel built from the sdist)")
    with tempfile.TemporaryDirectory(prefix="tp-release-python-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in PYTHON_SOURCES:
            if (ROOT / name).is_dir():
                junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
                shutil.copytree(ROOT / name, src / name, ignore=junk)
            else:
                shutil.copy2(ROOT / name, src / name)
        dist = Path(tmp) / "dist"
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(dist), str(src)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ReleaseError(f"python -m build failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
        files = sorted(dist.iterdir())
        expected = {f"tritonpipeline-{version}-py3-none-any.whl", f"tritonpipeline-{version}.tar.gz"}
        if {f.name for f in files} != expected:
            raise ReleaseError(
                f"python -m build wrote {[f.name for f in files]}, expected {sorted(expected)}"
            )
        moved = [Path(shutil.move(f, out / f.name)) for f in files]
    log(f"python: {', '.join(p.name for p in moved)} in {time.monotonic() - t:.0f}s")
    return moved


def sbom(archive: Path, repository: str, version: str, out: Path) -> Path:
    """An SPDX JSON SBOM of the OCI archive by syft (built from Go modules on first use)."""
    t = time.monotonic()
    log(f"sbom: syft scanning {archive.name}")
    syft = _tool("syft")
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    cmd = [str(syft), "scan", f"oci-archive:{archive}", "--quiet", "--output", f"spdx-json={out}"]
    cmd += ["--source-name", repository, "--source-version", version]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or not out.exists():
        raise ReleaseError(f"syft failed ({proc.returncode}): {proc.stderr[-2000:]}")
    n = len(json.loads(out.read_text()).get("packages", []))
    log(f"sbom: {out.name}, {n} packages, in {time.monotonic() - t:.0f}s")
    return out


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _tool(name: str) -> Path:
    """A tool e2e/build-gotool.sh builds from Go modules (helm, syft, crane), built on first use."""
    from harness.gotools import ToolError, ToolUnavailable, ensure_tool, tool_path

    if not tool_path(name).exists():
        log(f"building {name} from Go modules (first use; syft takes about 4 minutes on 2 cores)")
    try:
        return ensure_tool(name)
    except (ToolUnavailable, ToolError) as err:
        raise ReleaseError(f"{name}: {err}") from err


def _crane(crane: Path, *args: str) -> str:
    proc = subprocess.run([str(crane), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ReleaseError(
            f"crane {' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout.strip()


def publish(
    dirs: list[Path], out: Path, chart_repo: str, repository: str | None = None, plain_http: bool = False
) -> dict[str, Any]:
    """Push the images of one or more releases of the same version (one per platform: `make release` on
    each architecture) and the chart: each archive by its digest (checked: the registry's digest is the
    one images.json gives), the platforms as one image index tagged VERSION (one platform: the image
    itself), then the chart packaged with those digests and `helm push`ed to `chart_repo`
    (oci://REGISTRY/PATH). Writes and returns `out`/published.json. The registry credentials are the
    user's: crane reads Docker's config, helm its registry config (`helm registry login`)."""
    from harness.helm import Helm

    listings = [json.loads((d / "images.json").read_text()) for d in dirs]
    versions = {listing["version"] for listing in listings}
    if len(versions) != 1:
        raise ReleaseError(f"the releases are of different versions: {sorted(versions)}")
    version = check_version(versions.pop())
    out.mkdir(parents=True, exist_ok=True)
    crane = _tool("crane")
    insecure = ["--insecure"] if plain_http else []
    published: dict[str, Any] = {"version": version, "images": {}}
    for role in ("operator", "assembler"):
        repo = listings[0]["images"][role]["repository"]
        if repository:
            repo = repository if role == "operator" else assembler_repository(repository)
        platforms: dict[str, str] = {}
        for directory, listing in zip(dirs, listings, strict=True):
            entry = listing["images"][role]
            if entry["platform"] in platforms:
                raise ReleaseError(f"two releases of {entry['platform']}: {dirs}")
            target = f"{repo}:{version}-{entry['platform'].split('/')[1]}"
            t = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="tp-release-push-") as tmp:
                subprocess.run(["tar", "-xf", str(directory / entry["archive"]), "-C", tmp], check=True)
                _crane(crane, "push", *insecure, tmp, target)
            pushed = _crane(crane, "digest", *insecure, target)
            if pushed != entry["digest"]:
                raise ReleaseError(f"{target}: the registry has {pushed}, images.json says {entry['digest']}")
            log(f"pushed {target} ({pushed}) in {time.monotonic() - t:.0f}s")
            platforms[entry["platform"]] = pushed
        if len(platforms) == 1:
            (digest,) = platforms.values()
            _crane(crane, "tag", *insecure, f"{repo}@{digest}", version)
        else:
            manifests = [arg for d in platforms.values() for arg in ("-m", f"{repo}@{d}")]
            _crane(crane, "index", "append", *insecure, *manifests, "-t", f"{repo}:{version}")
            digest = _crane(crane, "digest", *insecure, f"{repo}:{version}")
            log(f"{repo}:{version}: an image index of {', '.join(platforms)} ({digest})")
        published["images"][role] = {
            "repository": repo, "tag": version, "digest": digest, "reference": f"{repo}@{digest}",
            "platforms": platforms,
        }  # fmt: skip
    digests = {role: entry["digest"] for role, entry in published["images"].items()}
    package = package_chart(version, published["images"]["operator"]["repository"], digests, out)
    with tempfile.TemporaryDirectory(prefix="tp-release-helm-") as tmp:
        helm = Helm(_tool("helm"), Path(tmp))
        home = Path.home()
        helm.env["DOCKER_CONFIG"] = os.environ.get("DOCKER_CONFIG", str(home / ".docker"))
        helm.env["HELM_REGISTRY_CONFIG"] = os.environ.get(
            "HELM_REGISTRY_CONFIG", str(home / ".config" / "helm" / "registry" / "config.json")
        )
        proc = helm.run("push", str(package), chart_repo, *(["--plain-http"] if plain_http else []))
    found = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", proc.stdout + proc.stderr, re.MULTILINE)
    if found is None:
        raise ReleaseError(f"helm push printed no digest: {proc.stdout}{proc.stderr}")
    chart_ref = f"{chart_repo.rstrip('/')}/{CHART_NAME}"
    published["chart"] = {"reference": chart_ref, "version": version, "digest": found.group(1)}
    log(f"pushed {chart_ref}:{version} ({found.group(1)})")
    (out / "published.json").write_text(json.dumps(published, indent=2) + "\n")
    return published


def write_sums(directory: Path) -> Path:
    """SHA256SUMS over every other file of `directory`, in sha256sum's format."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name != SUMS)
    sums = directory / SUMS
    sums.write_text("".join(f"{file_sha256(p)}  {p.name}\n" for p in files))
    log(f"{SUMS}: {len(files)} files")
    return sums


# ---------------------------------------------------------------------------------------------------


def chart_repository() -> str:
    """The chart's default image.repository (values.yaml)."""
    import yaml

    return str(yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]).strip()


def release(version: str, out: Path | None = None, repository: str | None = None) -> Path:
    """Everything into `out` (dist/release/VERSION/ by default, emptied first)."""
    t = time.monotonic()
    version = check_version(version)
    repository = repository or chart_repository()
    out = out or DIST / version
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    source = source_state()
    changes = " with local changes" if source["dirty"] else ""
    log(f"{version} from {source['commit'] or 'no commit'}{changes} into {out}")
    images = build_images(version, repository, out)
    digests = {role: entry["digest"] for role, entry in images["images"].items()}
    for role, entry in images["images"].items():
        entry["sbom"] = sbom(
            out / entry["archive"], entry["repository"], version, out / f"{role}-{version}.spdx.json"
        ).name
    (out / "images.json").write_text(
        json.dumps({"version": version, "source": source, **images}, indent=2) + "\n"
    )
    package_chart(version, repository, digests, out)
    build_python(version, out)
    write_sums(out)
    log(f"done in {time.monotonic() - t:.0f}s: {out}")
    for path in sorted(out.iterdir()):
        print(f"  {path.stat().st_size / 1e6:9.1f} MB  {path.name}")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m e2e.release", description=__doc__.split("\n\n")[0])
    try:
        if argv[:1] == ["publish"]:
            parser.add_argument("command")
            parser.add_argument("releases", type=Path, nargs="+", help="release directories of one version")
            parser.add_argument(
                "--chart-repo", required=True, help="oci://REGISTRY/PATH the chart is pushed to"
            )
            parser.add_argument(
                "--repository", default=None, help="the operator image's (default: images.json's)"
            )
            parser.add_argument(
                "--out", type=Path, required=True, help="where the chart and published.json go"
            )
            parser.add_argument("--plain-http", action="store_true", help="a registry without TLS")
            args = parser.parse_args(argv)
            publish(args.releases, args.out, args.chart_repo, args.repository, args.plain_http)
        elif argv[:1] == ["sums"]:
            parser.add_argument("command")
            parser.add_argument("directory", type=Path)
            write_sums(parser.parse_args(argv).directory)
        else:
            parser.add_argument("version", nargs="?", default="", help="X.Y.Z: pyproject.toml's version")
            parser.add_argument("--out", type=Path, default=None, help="default: dist/release/VERSION")
            parser.add_argument(
                "--repository", default=None, help="the operator image's repository (default: the chart's)"
            )
            args = parser.parse_args(argv)
            release(args.version, args.out, args.repository)
    except ReleaseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
