"""spec.server.tracing as tritonserver's `--trace-config` flags (pure): one renderer for the cluster's
Triton container (render/manifests.py) and `tritonpipeline serve` (cli/cmd_serve.py).

The flags are Triton's own (docs/user_guide/trace.md of triton-inference-server/server): the global
settings `mode=`, `level=` (once per level), `rate=` and `count=`; mode triton's `triton,file=` and
`triton,log-frequency=`; mode opentelemetry's `opentelemetry,url=` and one `opentelemetry,resource=KEY=VALUE`
per resource attribute. Each is written `--trace-config=VALUE`, one list item, as getopt_long reads it."""

from __future__ import annotations

from collections.abc import Mapping

from ..spec.server import Tracing

TRACE_DIR = "/tp/traces"  # the pod's emptyDir for mode triton's file
TRACE_FILE = f"{TRACE_DIR}/trace.json"
TRACE_VOLUME_SIZE = "1Gi"
SERVICE_NAME = "service.name"


def trace_args(tracing: Tracing | None, service: str, trace_file: str = TRACE_FILE) -> list[str]:
    """The tritonserver flags of `tracing` (none without it): `service` is `service.name` unless the
    spec's resource attributes give one; `trace_file` is where mode triton writes its traces."""
    if tracing is None:
        return []
    settings = [f"mode={tracing.mode}", *(f"level={level}" for level in tracing.level)]
    settings.append(f"rate={tracing.rate}")
    if tracing.count is not None:
        settings.append(f"count={tracing.count}")
    if tracing.mode == "triton":
        settings.append(f"triton,file={trace_file}")
        if tracing.log_frequency is not None:
            settings.append(f"triton,log-frequency={tracing.log_frequency}")
    else:
        if tracing.url is not None:
            settings.append(f"opentelemetry,url={tracing.url}")
        settings += [f"opentelemetry,resource={k}={v}" for k, v in resources(tracing, service).items()]
    return [f"--trace-config={setting}" for setting in settings]


def resources(tracing: Tracing, service: str) -> Mapping[str, str]:
    """The spans' resource attributes: `service.name` first (the spec's, else `service`), then the others
    in the spec's order."""
    named = tracing.resource.get(SERVICE_NAME, service)
    return {SERVICE_NAME: named, **{k: v for k, v in tracing.resource.items() if k != SERVICE_NAME}}


def collector(tracing: Tracing | None) -> str | None:
    """The OTLP/HTTP URL the pods send spans to, when the spec names one."""
    return tracing.url if tracing is not None and tracing.mode == "opentelemetry" else None
