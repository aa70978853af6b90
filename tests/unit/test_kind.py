"""`make e2e` on kind: the pure parts (cluster configuration, CNI, routes, the Docker engine's settings, the
runc capability filter, docker archives) and, marked `kind`, the whole run on a real kind cluster.
Here the pure tests; those on real components are in tests/cluster/test_kind.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import tomllib

from e2e import docker_engine, host, kind, kind_image, runc_capfilter
from helpers import ROOT

# ----------------------------------------------------------------------------------- cluster config


def test_cluster_config_one_control_plane_then_workers_each_with_the_models() -> None:
    config = kind.cluster_config(2, Path("/repo/model_repository"), cgroup_v1=False, no_sys_resource=False)
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    for n in config["nodes"]:
        assert n["extraMounts"] == [
            {"hostPath": "/repo/model_repository", "containerPath": "/models/triton", "readOnly": True}
        ]
    assert config["networking"] == {"disableDefaultCNI": True, "podSubnet": kind.POD_SUBNET}
    # a host that needs nothing special gets nothing special but what the release's registry needs: the
    # nodes pull from it, and use what they pulled under the chart's image names too
    (kubelet,) = config["kubeadmConfigPatches"]
    assert kind.yaml.safe_load(kubelet) == {
        "kind": "KubeletConfiguration", "imagePullCredentialsVerificationPolicy": "NeverVerify"
    }  # fmt: skip
    (registry,) = config["containerdConfigPatches"]
    assert tomllib.loads(registry) == {
        "plugins": {"io.containerd.grpc.v1.cri": {"registry": {"config_path": kind.REGISTRY_HOSTS_DIR}}}
    }


def test_cluster_config_patches_only_what_the_host_needs() -> None:
    v1 = kind.cluster_config(0, Path("/m"), cgroup_v1=True, no_sys_resource=False)
    assert [n["role"] for n in v1["nodes"]] == ["control-plane"]
    (patch,) = v1["kubeadmConfigPatches"]
    assert kind.yaml.safe_load(patch) == {
        "kind": "KubeletConfiguration", "imagePullCredentialsVerificationPolicy": "NeverVerify",
        "failCgroupV1": False,
    }  # fmt: skip
    assert len(v1["containerdConfigPatches"]) == 1

    capless = kind.cluster_config(1, Path("/m"), cgroup_v1=False, no_sys_resource=True)
    patches = [kind.yaml.safe_load(p) for p in capless["kubeadmConfigPatches"]]
    assert {"kind": "KubeletConfiguration", "imagePullCredentialsVerificationPolicy": "NeverVerify",
            "oomScoreAdj": 0} in patches  # fmt: skip
    assert {"kind": "KubeProxyConfiguration", "oomScoreAdj": 0} in patches
    assert "restrict_oom_score_adj = true" in capless["containerdConfigPatches"][1]


def test_the_nodes_pull_from_the_run_s_registry_over_plain_http() -> None:
    """containerd's hosts.toml (its documented format): the registry at HOST:PORT, HTTP, pull and resolve."""
    hosts = tomllib.loads(kind.registry_hosts_toml("172.18.0.3:5000"))
    assert hosts == {
        "server": "http://172.18.0.3:5000",
        "host": {"http://172.18.0.3:5000": {"capabilities": ["pull", "resolve"]}},
    }


def test_the_tutorial_s_helm_reads_the_public_chart_from_the_run_s_registry(tmp_path: Path) -> None:
    """The page's helm commands run as written: a public chart reference is read from the run's registry
    over plain HTTP, every other argument passes unchanged (a stand-in helm on PATH prints its arguments)."""
    public = kind.public_charts()
    assert public.startswith("oci://") and public.endswith("/")
    (tmp_path / "helm").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (tmp_path / "helm").chmod(0o755)
    line = (
        f'helm install triton-pipeline {public}charts/triton-pipeline --version 1.2.3 -n "a b"\nhelm test x\n'
    )
    proc = subprocess.run(
        ["bash", "-c", kind.helm_mapping(public, "oci://10.0.0.2:5000/owner/") + line],
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert proc.stdout.splitlines() == [
        "install", "triton-pipeline", "oci://10.0.0.2:5000/owner/charts/triton-pipeline", "--plain-http",
        "--version", "1.2.3", "-n", "a b", "test", "x",
    ]  # fmt: skip


def test_the_public_chart_is_where_the_release_workflow_pushes_it() -> None:
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert '--chart-repo "oci://$REGISTRY/$OWNER/charts"' in workflow
    owner = kind.public_charts().removeprefix("oci://").rstrip("/")
    assert owner.count("/") == 1, owner  # REGISTRY/OWNER


MOUNTINFO_V1 = """\
25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
27 26 0:25 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
28 26 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
"""


MOUNTINFO_V2 = "25 30 0:23 / /sys rw - sysfs sysfs rw\n26 25 0:24 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"


def test_cgroup_version_from_mountinfo() -> None:
    assert kind.cgroup_v1(MOUNTINFO_V1) is True
    assert kind.cgroup_v1(MOUNTINFO_V2) is False
    assert kind.cgroup_v1("25 30 0:23 / /sys rw - sysfs sysfs rw\n") is False


def test_cni_conflist_gives_the_node_its_own_pod_cidr() -> None:
    conf = kind.cni_conflist("10.244.2.0/24")
    ptp, portmap = conf["plugins"]
    assert ptp["type"] == "ptp" and ptp["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24"}]]
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}
    with pytest.raises(ValueError):
        kind.cni_conflist("10.244.2.0/33")


def test_node_routes_reach_every_other_node_pods_and_not_its_own() -> None:
    nodes = {
        "cp": ("172.18.0.2", "10.244.0.0/24"),
        "w1": ("172.18.0.3", "10.244.1.0/24"),
        "w2": ("172.18.0.4", "10.244.2.0/24"),
    }
    routes = kind.node_routes(nodes)
    assert routes["cp"] == [("10.244.1.0/24", "172.18.0.3"), ("10.244.2.0/24", "172.18.0.4")]
    assert routes["w2"] == [("10.244.0.0/24", "172.18.0.2"), ("10.244.1.0/24", "172.18.0.3")]
    assert kind.node_routes({"only": ("172.18.0.2", "10.244.0.0/24")}) == {"only": []}


def test_example_doc_serves_from_the_claim_on_cpu() -> None:
    doc = kind.example_doc(ROOT / "examples" / "fanout.yaml", "local/triton:cpu")
    assert doc["metadata"] == {"name": "vision", "namespace": kind.NAMESPACE}
    assert doc["spec"]["modelRepository"]["uri"] == "pvc://models/triton"
    server = doc["spec"]["server"]
    assert (server["gpus"], server["image"], server["resources"]) == (0, "local/triton:cpu", kind.SMALL)


JUNIT = """<testsuites><testsuite>
<testcase name="a" time="1.5"><properties><property name="broken" value="0"/>
<property name="node" value="w1"/></properties></testcase>
<testcase name="b" time="2"><failure message="boom"/></testcase>
<testcase name="c" time="0"><error message="setup"/></testcase>
<testcase name="d" time="0"><skipped message="needs two nodes"/></testcase>
</testsuite></testsuites>"""


def test_scenario_rows_from_junit_count_only_real_passes() -> None:
    rows = {r.step: r for r in kind.junit_rows(JUNIT)}
    assert [(r.ok, r.detail) for r in rows.values()] == [
        (True, ""),
        (False, "boom"),
        (False, "setup"),
        (False, "skipped: needs two nodes"),
    ]
    assert rows["scenario a"].figures == {"broken": 0, "node": "w1"}
    assert rows["scenario a"].seconds == 1.5


# ----------------------------------------------------------------------------------- the Docker engine


def test_missing_capabilities_from_the_bounding_set() -> None:
    assert docker_engine.missing_capabilities(0x000001FFFEFFFFFF, 40) == [24]  # CAP_SYS_RESOURCE
    assert docker_engine.missing_capabilities(0x000001FFFFFFFFFF, 40) == []
    assert docker_engine.missing_capabilities(0x0000000000000000, 2) == [0, 1, 2]


def test_daemon_config_keeps_everything_but_the_data_root_in_the_run_directory() -> None:
    run = Path("/run/tpkind-1")
    config = docker_engine.daemon_config(run, Path("/cache/docker"), "/tpkind-1", None)
    assert config["data-root"] == "/cache/docker"
    for key in ("exec-root", "pidfile"):
        assert config[key].startswith(str(run))
    assert config["hosts"] == ["unix:///run/tpkind-1/docker.sock"]
    assert config["cgroup-parent"] == "/tpkind-1"
    assert "runtimes" not in config and "default-runtime" not in config
    wrapped = docker_engine.daemon_config(run, Path("/c"), "/p", Path("/x/runc_capfilter.py"))
    assert wrapped["runtimes"] == {"capfilter": {"path": "/x/runc_capfilter.py"}}
    assert wrapped["default-runtime"] == "capfilter"


CAPS = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_BPF"]


def test_capfilter_keeps_only_allowed_capabilities() -> None:
    caps = {"bounding": list(CAPS), "effective": list(CAPS), "ambient": []}
    runc_capfilter.filter_caps(caps, {"CAP_CHOWN", "CAP_BPF"})
    assert caps == {
        "bounding": ["CAP_CHOWN", "CAP_BPF"],
        "effective": ["CAP_CHOWN", "CAP_BPF"],
        "ambient": [],
    }
    assert runc_capfilter.option(["--bundle", "/b", "id"], "--bundle", "-b") == "/b"
    assert runc_capfilter.option(["-b=/c", "id"], "--bundle", "-b") == "/c"
    assert runc_capfilter.option(["id"], "--bundle", "-b") is None


def _fake_runc(tmp_path: Path) -> Path:
    """A stand-in for the real runc that records its arguments and the spec it was handed."""
    fake = tmp_path / "runc"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        'for a in "$@"; do case "$prev" in --bundle|-b) cp "$a/config.json" '
        f'{tmp_path}/seen.json;; --process|-p) cp "$a" {tmp_path}/seen.json;; esac; prev="$a"; done\n'
    )
    fake.chmod(0o755)
    return fake


def test_capfilter_rewrites_create_and_exec_specs_then_runs_runc(tmp_path: Path) -> None:
    """The wrapper as dockerd runs it: what the bounding set lacks is gone from the spec runc gets, the
    rest and the arguments are unchanged."""
    allowed = runc_capfilter.allowed()
    want = [c for c in CAPS if c in allowed]
    env = {**os.environ, "CAPFILTER_RUNC": str(_fake_runc(tmp_path))}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"ociVersion": "1.2.0", "process": {"capabilities": {"bounding": CAPS, "permitted": CAPS}}}
    (bundle / "config.json").write_text(json.dumps(spec))
    wrapper = str(ROOT / "e2e" / "runc_capfilter.py")
    args = ["--root", "/r", "create", "--bundle", str(bundle), "ctr1"]
    subprocess.run([wrapper, *args], env=env, check=True)
    assert (tmp_path / "args").read_text().split() == args
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["process"]["capabilities"] == {"bounding": want, "permitted": want}
    assert seen["ociVersion"] == "1.2.0"

    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["sh"], "capabilities": {"effective": CAPS}}))
    subprocess.run([wrapper, "exec", "--process", str(process), "ctr1"], env=env, check=True)
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"args": ["sh"], "capabilities": {"effective": want}}


# ----------------------------------------------------------------------------------- the node image


def test_docker_archive_lists_tags_first_and_stores_shared_layers_once(tmp_path: Path) -> None:
    shared = kind_image._file_layer(tmp_path / "a.tar", {"usr/local/bin/x": (b"x", 0o755)})
    own = kind_image._file_layer(tmp_path / "b.tar", {"y": (b"y", 0o644)})
    images = [
        kind_image.ArchiveImage(["registry.k8s.io/one:v1"], [shared], {"Entrypoint": ["/x"]}),
        kind_image.ArchiveImage(["kindest/two:v2", "kindest/two:latest"], [shared, own], {}),
    ]
    out = kind_image.write_docker_archive(images, tmp_path / "images.tar")
    with tarfile.open(out) as tar:
        names = tar.getnames()
        assert names[0] == "repositories"  # kind reads the tags from the first metadata entry
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        repositories = json.load(tar.extractfile("repositories"))  # type: ignore[arg-type]
        assert [m["RepoTags"] for m in manifest] == [
            ["registry.k8s.io/one:v1"],
            ["docker.io/kindest/two:v2", "docker.io/kindest/two:latest"],
        ]
        assert sorted(repositories) == ["docker.io/kindest/two", "registry.k8s.io/one"]
        assert sum(n.endswith("layer.tar") for n in names) == 2
        for m in manifest:
            config = json.load(tar.extractfile(m["Config"]))  # type: ignore[arg-type]
            for layer, diff_id in zip(m["Layers"], config["rootfs"]["diff_ids"], strict=True):
                data = tar.extractfile(layer).read()  # type: ignore[union-attr]
                assert diff_id == "sha256:" + hashlib.sha256(data).hexdigest()
        assert json.load(tar.extractfile(manifest[0]["Config"]))["config"] == {"Entrypoint": ["/x"]}  # type: ignore[arg-type]


def test_cri_base_spec_adds_kinds_hook_and_drops_rlimits() -> None:
    default = {"process": {"rlimits": [{"type": "RLIMIT_NOFILE"}], "cwd": "/"}, "hooks": {}}
    spec = kind_image.cri_base_spec(default)
    assert spec["hooks"]["createContainer"] == [{"path": "/kind/bin/mount-product-files.sh"}]
    assert spec["process"] == {"cwd": "/"}
    assert default["process"]["rlimits"]  # the input is left as it was


def test_kind_source_reads_the_image_names_from_kinds_module(tmp_path: Path) -> None:
    root = tmp_path / "kind"
    (root / "pkg/build/nodeimage").mkdir(parents=True)
    (root / "pkg/apis/config/defaults").mkdir(parents=True)
    (root / "images/base/files/etc/containerd").mkdir(parents=True)
    (root / "pkg/build/nodeimage/const_cni.go").write_text(
        'const kindnetdImage = "docker.io/kindest/kindnetd:v1"\n'
    )
    (root / "pkg/build/nodeimage/const_storage.go").write_text(
        'const storageProvisionerImage = "docker.io/kindest/lpp:v2"\n'
        'const storageHelperImage = "docker.io/kindest/h:v3"\n'
    )
    (root / "pkg/apis/config/defaults/image.go").write_text(
        'const Image = "kindest/node:v1.37.0@sha256:ab"\n'
    )
    (root / "images/base/files/etc/containerd/config.toml").write_text(
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
    )
    src = kind_image.KindSource("v0", root)
    assert src.addon_images() == {
        "kindnetd": "docker.io/kindest/kindnetd:v1",
        "local-path-provisioner": "docker.io/kindest/lpp:v2",
        "local-path-helper": "docker.io/kindest/h:v3",
    }
    assert src.sandbox_image() == "registry.k8s.io/pause:3.10"
    assert src.default_node_image() == "kindest/node:v1.37.0@sha256:ab"
    (root / "pkg/build/nodeimage/const_cni.go").write_text("// renamed\n")
    with pytest.raises(kind_image.ImageError, match="kindnetdImage"):
        src.addon_images()


def test_sys_resource_from_the_bounding_set() -> None:
    assert kind_image.lacks_sys_resource(0x000001FFFEFFFFFF) is True
    assert kind_image.lacks_sys_resource(0x000001FFFFFFFFFF) is False


def test_restore_sysctls_writes_back_only_what_changed() -> None:
    """restore_sysctls on values read just now: nothing to put back; a key that does not exist is skipped."""
    now = host.read_sysctls()
    assert set(now) == set(host.HOST_SYSCTLS)
    assert host.restore_sysctls(now) == []
    assert host.restore_sysctls({"no/such/key": None}) == []


# a run that cleans up for two seconds after a Ctrl-C, and the test's caller, Ctrl-C'd a second in (in a
# session of its own, so the SIGINT reaches only the two of them)
CLEANS_UP_SLOWLY = """
import signal, sys, time
try:
    time.sleep(60)
except KeyboardInterrupt:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(2)
    open(sys.argv[1], "w").write("cleaned")
"""


INTERRUPTED_CALLER = """
import os, signal, subprocess, sys, threading
sys.path[:0] = [{tests!r}, {root!r}]
from support.kind import run_to_its_clean_up
threading.Timer(1.0, lambda: os.killpg(os.getpgrp(), signal.SIGINT)).start()
cmd = [sys.executable, "-c", {child!r}, sys.argv[1]]
try:
    if sys.argv[2] == "ours":
        run_to_its_clean_up(cmd, timeout=30)
    else:
        subprocess.run(cmd, capture_output=True, timeout=30)
except KeyboardInterrupt:
    pass
"""


@pytest.mark.parametrize(("runner", "cleaned"), [("ours", True), ("subprocess.run", False)])
def test_a_ctrl_c_waits_for_the_runs_clean_up(tmp_path: Path, runner: str, cleaned: bool) -> None:
    """run_to_its_clean_up waits while the interrupted run cleans up; subprocess.run killed it."""
    caller = INTERRUPTED_CALLER.format(tests=str(ROOT / "tests"), root=str(ROOT), child=CLEANS_UP_SLOWLY)
    mark = tmp_path / "mark"
    subprocess.run([sys.executable, "-c", caller, str(mark), runner], start_new_session=True, timeout=60)
    time.sleep(3 if not cleaned else 0)  # a killed child would have written by now, had it lived
    assert mark.exists() == cleaned


def test_the_scenario_list_is_every_anycluster_test_file() -> None:
    """e2e/kind.py runs SCENARIO_TESTS; `make test` deselects marker anycluster: the two must agree, or a
    scenario would run nowhere."""
    marked = sorted(
        p.name
        for p in (ROOT / "tests" / "cluster").glob("test_*.py")
        if re.search(r"^pytestmark = .*pytest\.mark\.anycluster\b", p.read_text(), re.M)
    )
    assert sorted(kind.SCENARIO_TESTS) == marked


@pytest.mark.parametrize(
    ("image", "full"),
    [
        ("kindest/kindnetd:v1", "docker.io/kindest/kindnetd:v1"),
        ("busybox:1", "docker.io/library/busybox:1"),
        ("docker.io/kindest/x:1", "docker.io/kindest/x:1"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("localhost/x:1", "localhost/x:1"),
        ("host:5000/x:1", "host:5000/x:1"),
    ],
)
def test_image_names_in_an_archive_are_fully_qualified(image: str, full: str) -> None:
    """kind reads an archive's tags as containerd names them: Docker Hub's defaults filled in."""
    from tritonpipeline.render.checks import full_reference

    assert full_reference(image) == full
