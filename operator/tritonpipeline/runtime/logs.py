"""Log lines users can search: time, level and the pipeline's namespace/name on every line about one.

`full` (the default): `2026-01-02T03:04:05.678Z INFO    kopf.objects [ml/vision] reconcile: ...`;
`json`: one object a line with `timestamp`, `severity`, `message` and `object` (the pipeline's
apiVersion, kind, namespace, name, uid); `plain`: level, `[namespace/name]` and the message, for
collectors that stamp the time themselves."""

from __future__ import annotations

import logging
import time

FORMATS = ("plain", "full", "json")
_TEXT = {
    "plain": "%(levelname)-7s %(message)s",
    "full": "%(asctime)s %(levelname)-7s %(name)s %(message)s",
}


def configure(log_format: str, verbose: bool) -> None:
    """kopf's logging set up with `log_format`; the object prefix/reference on every object's line."""
    import kopf

    if log_format == "json":
        kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON, log_prefix=False, log_refkey="object")
        return
    kopf.configure(verbose=verbose, log_format=_TEXT[log_format], log_prefix=True)  # type: ignore[arg-type]
    for handler in logging.getLogger().handlers:
        formatter = handler.formatter
        if formatter is not None:  # UTC, ISO 8601 with milliseconds: lines sort and correlate across pods
            formatter.converter = time.gmtime
            formatter.default_time_format = "%Y-%m-%dT%H:%M:%S"
            formatter.default_msec_format = "%s.%03dZ"
