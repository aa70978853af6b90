"""NVIDIA's Triton security bulletins, and which `server.image` tags predate their fixes (pure).

NVIDIA's Triton containers are tagged YY.MM (`nvcr.io/nvidia/tritonserver:26.07-py3`); a bulletin names its
fixed release as the container YY.MM or the release branch rYY.MM (the same release; the server inside is
version 2.N, which no bulletin from 2024 on uses). Every entry below was read from NVIDIA's own bulletin in
the public GitHub repository NVIDIA/product-security (path in each entry's comment), which holds every
Triton bulletin from 2024 on. `fixed_in` is the release NVIDIA says to update to, the one that carries
the fix of every CVE of the bulletin (some CVEs of a bulletin were fixed a release or two earlier).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, int]  # (YY, MM)

# a Triton server image: the repository's last path part is tritonserver, the tag YY.MM[-suffix]
IMAGE_RE = re.compile(r"^(?:.*/)?tritonserver:(\d{2})\.(\d{2})(?:-[A-Za-z0-9._-]+)?$")


@dataclass(frozen=True)
class Advisory:
    bulletin: int  # NVIDIA's bulletin id
    published: str  # date of the bulletin's initial release, YYYY-MM-DD
    cves: tuple[str, ...]
    summary: str
    fixed_in: Release  # the oldest release carrying the fixes of all its CVEs


def label(found: Release) -> str:
    """A release as NVIDIA tags its containers: YY.MM."""
    return f"{found[0]:02d}.{found[1]:02d}"


# fmt: off
ADVISORIES: tuple[Advisory, ...] = (
    Advisory(  # 2024/5535/5535.md
        5535, "2024-04-30", ("CVE-2024-0087", "CVE-2024-0088", "CVE-2024-0100"),
        "the logging API appends to an arbitrary file; the trace API can corrupt system files; the "
        "shared-memory APIs allow improper memory access",
        (24, 4),
    ),
    Advisory(  # 2024/5546/5546.md
        5546, "2024-05-29", ("CVE-2024-0095", "CVE-2024-0103"),
        "forged log entries injected through requests; information disclosed through an incorrectly "
        "initialized resource",
        (24, 5),
    ),
    Advisory(  # 2024/5565/5565.md
        5565, "2024-09-30", ("CVE-2024-0116",),
        "out-of-bounds read by releasing a shared-memory region while it is in use",
        (24, 9),
    ),
    Advisory(  # 2025/5612/5612.md
        5612, "2025-02-11", ("CVE-2024-53880",),
        "integer overflow in the model loading API through an extra-large model file",
        (24, 12),
    ),
    Advisory(  # 2025/5687/5687.md (its CVEs fixed in 25.05, 25.06 and 25.07)
        5687, "2025-08-04",
        ("CVE-2025-23268", "CVE-2025-23310", "CVE-2025-23311", "CVE-2025-23317", "CVE-2025-23318",
         "CVE-2025-23319", "CVE-2025-23320", "CVE-2025-23321", "CVE-2025-23322", "CVE-2025-23323",
         "CVE-2025-23324", "CVE-2025-23325", "CVE-2025-23326", "CVE-2025-23327", "CVE-2025-23331",
         "CVE-2025-23333", "CVE-2025-23334", "CVE-2025-23335"),
        "stack overflows and a reverse shell through crafted HTTP requests; out-of-bounds reads and writes "
        "through the Python backend's shared memory (a remote code execution chain); crashes from invalid "
        "requests; DALI-backend input validation",
        (25, 7),
    ),
    Advisory(  # 2025/5691/5691.md (CVE-2025-23268 fixed in 25.07, the others in 25.08)
        5691, "2025-09-16",
        ("CVE-2025-23268", "CVE-2025-23316", "CVE-2025-23328", "CVE-2025-23329", "CVE-2025-23336"),
        "remote code execution through the model name in the model control APIs (Python backend); memory "
        "corruption through the Python backend's shared memory; out-of-bounds write; a misconfigured model "
        "crashes the server",
        (25, 8),
    ),
    Advisory(  # 2025/5723/5723.md
        5723, "2025-11-11", ("CVE-2025-33202",),
        "stack overflow from extra-large payloads",
        (25, 9),
    ),
    Advisory(  # 2025/5734/5734.md
        5734, "2025-12-02", ("CVE-2025-33201", "CVE-2025-33211"),
        "denial of service through extra-large payloads and an unchecked quantity in the input",
        (25, 10),
    ),
    Advisory(  # 2026/5790/5790.md
        5790, "2026-03-24", ("CVE-2025-33238", "CVE-2025-33254", "CVE-2026-24158"),
        "denial of service: an exception in the SageMaker HTTP server, internal state corruption, a large "
        "compressed HTTP payload",
        (26, 1),
    ),
    Advisory(  # 2026/5816/5816.md
        5816, "2026-04-07",
        ("CVE-2026-24146", "CVE-2026-24147", "CVE-2026-24173", "CVE-2026-24174", "CVE-2026-24175"),
        "crashes from malformed requests and headers and from many outputs; information disclosure by "
        "uploading a model configuration",
        (26, 2),
    ),
    Advisory(  # 2026/5828/5828.md
        5828, "2026-05-19",
        ("CVE-2026-24206", "CVE-2026-24207", "CVE-2026-24208", "CVE-2026-24209", "CVE-2026-24210",
         "CVE-2026-24213", "CVE-2026-24214", "CVE-2026-24215"),
        "authentication bypasses; path traversals; integer overflow; DALI-backend out-of-bounds read, "
        "integer overflow and resource exhaustion",
        (26, 3),
    ),
    Advisory(  # 2026/5848/5848.md
        5848, "2026-06-30", ("CVE-2026-24264", "CVE-2026-24266"),
        "denial of service through highly compressed data and a use-after-free",
        (26, 4),
    ),
    Advisory(  # 2026/5853/5853.md
        5853, "2026-07-14",
        ("CVE-2026-47476", "CVE-2026-47477", "CVE-2026-47478", "CVE-2026-47479", "CVE-2026-47480",
         "CVE-2026-47481", "CVE-2026-47482"),
        "authentication bypass through an alternative path; stack buffer overflow, resource exhaustion and "
        "other denial of service",
        (26, 5),
    ),
    Advisory(  # 2026/5860/5860.md
        5860, "2026-08-04", ("CVE-2026-47487",),
        "files outside the model repository read or written through a path in the model name given to "
        "the MLflow plugin",
        (26, 3),
    ),
    Advisory(  # 2026/5865/5865.md
        5865, "2026-08-18",
        ("CVE-2026-47606", "CVE-2026-47627", "CVE-2026-47628", "CVE-2026-47629", "CVE-2026-47630"),
        "path traversals (absolute paths, up to code execution); improper input validation; allocation "
        "without limits",
        (26, 6),
    ),
    Advisory(  # 2026/5875/5875.md (CVE-2026-47625 fixed in 26.04, CVE-2026-16497 in 26.07)
        5875, "2026-09-08", ("CVE-2026-16497", "CVE-2026-47625"),
        "missing authorization; excessive iteration (denial of service)",
        (26, 7),
    ),
)
# fmt: on


def release(image: str) -> Release | None:
    """(YY, MM) of a Triton image tag, or None for another image, a digest or an unusual tag."""
    match = IMAGE_RE.match(image.partition("@")[0])  # a tag pinned by digest still names its release
    return (int(match.group(1)), int(match.group(2))) if match else None


def oldest_safe(advisories: tuple[Advisory, ...] = ADVISORIES) -> Release:
    """The oldest release that carries the fixes of every known bulletin."""
    return max(a.fixed_in for a in advisories)


def affecting(image: str, advisories: tuple[Advisory, ...] = ADVISORIES) -> list[Advisory]:
    """The bulletins whose fixes the image's release predates (none for an image this cannot date)."""
    found = release(image)
    if found is None:
        return []
    return [a for a in advisories if found < a.fixed_in]


def warning(image: str, advisories: tuple[Advisory, ...] = ADVISORIES) -> str | None:
    """Why this image is probably vulnerable, in one line, or None."""
    hits = affecting(image, advisories)
    if not hits:
        return None
    named = ", ".join(f"{a.bulletin} (fixed in {label(a.fixed_in)})" for a in hits)
    return (
        f"{image!r} is a Triton release older than {label(oldest_safe(advisories))}, the oldest that carries "
        f"the fixes of NVIDIA's Triton security bulletins known to tritonpipeline; it lacks those of "
        f"bulletins {named} (docs/concepts/security.md lists their CVEs); use a newer tritonserver image"
    )
