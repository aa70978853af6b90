"""Which backend the routers run on, for one pipeline (pure): one rule per source of the answer, in order,
each with its reason as a named message. The operator records the choice in status.graph.routerBackend;
the rendered repository shows it in each router's config.pbtxt (`backend: "tprouter"` or `"python"`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import RouterMode
from ..spec import TritonPipeline
from ..triton.advisories import Release, label, release

RouterBackend = Literal["native", "python"]
# the oldest Triton release the native router is known to run on: 24.10 is Triton 2.51, the tritonserver of
# the nvidia-pytriton wheel every test runs (its backend API is the one native_router.c declares)
NATIVE_SINCE: Release = (24, 10)

FORCED_BY_SPEC = "spec.server.router is {backend}"
FORCED_BY_OPERATOR = "the operator's router setting (TRITONPIPELINE_ROUTER) is {backend}"
SUPPORTED_RELEASE = "Triton {release} ({image}) runs the native router (from {since})"
OLDER_RELEASE = (
    "Triton {release} ({image}) is older than {since}, the oldest release the native router is known to run "
    "on; set spec.server.router: native to use it anyway"
)
UNKNOWN_RELEASE = (
    "the Triton release of image {image} cannot be told from its tag (NVIDIA's are tritonserver:YY.MM); set "
    "spec.server.router: native if it is Triton {since} or later"
)


@dataclass(frozen=True)
class RouterChoice:
    backend: RouterBackend
    reason: str


def forced_by_spec(tp: TritonPipeline) -> RouterChoice | None:
    mode = tp.spec.server.router
    return None if mode == "auto" else RouterChoice(mode, FORCED_BY_SPEC.format(backend=mode))


def forced_by_operator(default: RouterMode) -> RouterChoice | None:
    return None if default == "auto" else RouterChoice(default, FORCED_BY_OPERATOR.format(backend=default))


def by_image(tp: TritonPipeline) -> RouterChoice:
    image = tp.spec.server.image
    found = release(image)
    since = label(NATIVE_SINCE)
    if found is None:
        return RouterChoice("python", UNKNOWN_RELEASE.format(image=image, since=since))
    text = {"release": label(found), "image": image, "since": since}
    if found < NATIVE_SINCE:
        return RouterChoice("python", OLDER_RELEASE.format(**text))
    return RouterChoice("native", SUPPORTED_RELEASE.format(**text))


def choose_router(tp: TritonPipeline, default: RouterMode = "auto") -> RouterChoice:
    """The spec's choice, else the operator's setting, else what the Triton image runs."""
    return forced_by_spec(tp) or forced_by_operator(default) or by_image(tp)


# Triton allocates a non-Python backend's GPU outputs (the native router's copies) from its CUDA memory pool,
# 64 MiB a GPU by default, and falls back to pinned host memory when the pool is used up: under load the
# copies would then leave the GPU (measured on an H100: requests failed at concurrency 16 where the consumer
# takes GPU tensors only). Pods and `serve` running native routers on GPUs get this pool on each GPU
# instead, unless spec.server.args sets one.
NATIVE_ROUTER_CUDA_POOL_BYTES = 512 * 2**20
CUDA_POOL_FLAG = "--cuda-memory-pool-byte-size"


def router_pool_args(backend: RouterBackend, routers: int, gpus: int, args: list[str]) -> list[str]:
    """tritonserver's CUDA pool flags for native routers on `gpus` GPUs (device IDs 0..gpus-1); none
    for Python routers, no router, no GPU, or a pool the user's `args` set."""
    if backend != "native" or routers == 0 or gpus <= 0:
        return []
    if any(a == CUDA_POOL_FLAG or a.startswith(f"{CUDA_POOL_FLAG}=") for a in args):
        return []
    return [f"{CUDA_POOL_FLAG}={gpu}:{NATIVE_ROUTER_CUDA_POOL_BYTES}" for gpu in range(gpus)]
