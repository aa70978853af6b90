"""This operator's two corrections to kopf (1.45.2, pinned in pyproject.toml), installed once at start
(`install`, cli/cmd_run.py) and each checked there against the kopf it meets.

Depth. kopf reads the API server's JSON through jsontext (never deeper than jsontext.MAX_DEPTH): its
watches and lists, its answers to requests, the annotations it stores its progress and diff base in, and
the webhook's reviews. Python's decoder raised RecursionError on an object nested about 1,000 levels
deep; in a watch that ended kopf's watching of every pipeline, and a restart met the object again on its
first list (issue 54). kopf reads JSON with the `json` module each of KOPF_JSON_READERS imports, and with
aiohttp's ClientResponse.json: those modules get a `json` whose `loads` is jsontext's, and
ClientResponse.json jsontext's loads as its default. tests/component/test_tenants.py shows the result on
a real API server; a kopf that reads JSON elsewhere fails it.

Copies. kopf answers every admission review with Patch.as_json_patch, which deep-copied the whole object
before it looked whether there was anything to patch: a validating review never patches, nor does the
access review of a dry run, and on a storm of 0.9 MB dry runs those copies were two fifths of the event
loop's time, the loop that answers every other tenant's reviews (issue 54, `make bench-tenants`). The
empty answer now comes first (`as_json_patch`); a patch with content is built as kopf builds it.
"""

from __future__ import annotations

import importlib
import json
import types
from typing import Any

import aiohttp
from kopf._cogs.structs import patches

from .. import jsontext

# kopf's modules that read JSON with their own `import json` (kopf 1.45.2, pinned in pyproject.toml)
KOPF_JSON_READERS = (
    "kopf._cogs.clients.api",  # watch streams
    "kopf._cogs.configs.progress",  # the progress annotations
    "kopf._cogs.configs.diffbase",  # the last-handled configuration annotation
    "kopf._kits.webhooks",  # the webhook server's admission reviews
)


class _Json(types.ModuleType):
    """The json module, its loads jsontext's."""

    loads = staticmethod(jsontext.loads)

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


JSON = _Json("json")
_installed = False
KOPF_AS_JSON_PATCH = patches.Patch.as_json_patch


def as_json_patch(self: patches.Patch, body: Any = None) -> Any:
    """kopf's Patch.as_json_patch, its empty answer first: an empty patch ([]) costs no copy of `body`."""
    if not self:
        return []
    return KOPF_AS_JSON_PATCH(self, body)


def install() -> None:
    """Make kopf (and every aiohttp response of this process) read JSON through jsontext, and answer an
    empty admission patch without copying the object; once."""
    global _installed
    if _installed:
        return
    for name in KOPF_JSON_READERS:
        module = importlib.import_module(name)
        if getattr(module, "json", None) is not json:
            raise RuntimeError(f"{name} no longer imports json: see runtime/kopf_fixes.py")
        module.json = JSON  # type: ignore[attr-defined]
    read = aiohttp.ClientResponse.json

    async def json_response(
        self: aiohttp.ClientResponse,
        *,
        encoding: str | None = None,
        loads: Any = jsontext.loads,
        content_type: str | None = "application/json",
    ) -> Any:
        return await read(self, encoding=encoding, loads=loads, content_type=content_type)

    aiohttp.ClientResponse.json = json_response  # type: ignore[method-assign]
    if patches.Patch.as_json_patch is not KOPF_AS_JSON_PATCH:
        raise RuntimeError("kopf's Patch.as_json_patch is replaced already: see runtime/kopf_fixes.py")
    patches.Patch.as_json_patch = as_json_patch  # type: ignore[method-assign]
    _installed = True
