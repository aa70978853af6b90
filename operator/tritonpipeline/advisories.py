"""Published NVIDIA Triton security bulletins, and which `server.image` tags predate their fixes (pure).

NVIDIA's Triton containers are tagged YY.MM (`nvcr.io/nvidia/tritonserver:25.07-py3`). A bulletin whose
fixed release is known here marks every older release; where the fixed release could not be checked
from sources available when this table was written, `fixed_in` is None and every release up to the
bulletin's month is marked (a release from before or of that month cannot be assumed to carry the fix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, int]  # (YY, MM)

# a Triton server image: the repository's last path part is tritonserver, the tag YY.MM[-suffix]
IMAGE_RE = re.compile(r"^(?:.*/)?tritonserver:(\d{2})\.(\d{2})(?:-[A-Za-z0-9._-]+)?$")


@dataclass(frozen=True)
class Advisory:
    name: str
    published: Release
    cves: tuple[str, ...]
    summary: str
    fixed_in: Release | None  # None: the fixed release is not verified here

    @property
    def first_safe(self) -> Release:
        """The oldest release this table does not mark for this bulletin."""
        if self.fixed_in is not None:
            return self.fixed_in
        yy, mm = self.published
        return (yy + 1, 1) if mm == 12 else (yy, mm + 1)


ADVISORIES: tuple[Advisory, ...] = (
    Advisory(
        "NVIDIA Triton Inference Server security bulletin, 2024",
        (24, 5),
        ("CVE-2024-0087", "CVE-2024-0088"),
        "the logging API writes to an arbitrary file; shared-memory registration takes unchecked offsets",
        None,
    ),
    Advisory(
        "NVIDIA Triton Inference Server security bulletin, August 2025",
        (25, 8),
        ("CVE-2025-23310", "CVE-2025-23311", "CVE-2025-23319", "CVE-2025-23320", "CVE-2025-23334"),
        "stack overflow through chunked HTTP requests; Python-backend shared memory exposed through the "
        "shared-memory API (remote code execution chain)",
        (25, 7),
    ),
    Advisory(
        "NVIDIA Triton Inference Server security bulletin 5828, May 2026",
        (26, 5),
        ("CVE-2026-24206", "CVE-2026-24207", "CVE-2026-24208", "CVE-2026-24209"),
        "authentication bypass; path traversals",
        None,
    ),
)


def release(image: str) -> Release | None:
    """(YY, MM) of a Triton image tag, or None for another image, a digest or an unusual tag."""
    match = IMAGE_RE.match(image.partition("@")[0])  # a tag pinned by digest still names its release
    return (int(match.group(1)), int(match.group(2))) if match else None


def oldest_safe(advisories: tuple[Advisory, ...] = ADVISORIES) -> Release:
    """The oldest release that no known bulletin marks."""
    return max(a.first_safe for a in advisories)


def affecting(image: str, advisories: tuple[Advisory, ...] = ADVISORIES) -> list[Advisory]:
    """The bulletins whose fixes the image's release predates (none for an image this cannot date)."""
    found = release(image)
    if found is None:
        return []
    return [a for a in advisories if found < a.first_safe]


def warning(image: str, advisories: tuple[Advisory, ...] = ADVISORIES) -> str | None:
    """Why this image is probably vulnerable, in one line, or None."""
    hits = affecting(image, advisories)
    if not hits:
        return None
    yy, mm = oldest_safe(advisories)
    named = "; ".join(f"{a.name} ({', '.join(a.cves)}: {a.summary})" for a in hits)
    return (
        f"{image!r} is a Triton release older than {yy:02d}.{mm:02d}, the oldest release not affected by "
        f"the security bulletins known to tritonpipeline: {named}; use a newer tritonserver image"
    )
