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
