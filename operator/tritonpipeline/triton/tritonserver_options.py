"""tritonserver's command-line options as data, and a reader of `spec.server.args` that parses them the
way tritonserver does.

tritonserver reads its flags with getopt_long and no short options: `--name=value` or `--name value`
(the next list item, whatever it starts with), any unique prefix of a name (`--grpc-p=9001` is
`--grpc-port`), an ambiguous prefix is an error, and a non-option argument is refused. `OPTIONS` is the
table `tritonserver --help` prints (the binary of the nvidia-pytriton wheel); a test compares them so the
table cannot drift. Pure data and functions: the spec validates args with it, `serve` filters with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# option name -> value kind as `--help` writes it ("" = takes no value), in `--help` order
OPTIONS: dict[str, str] = {
    "help": "",
    "id": "string",
    "exit-timeout-secs": "integer",
    "log-verbose": "integer",
    "log-info": "boolean",
    "log-warning": "boolean",
    "log-error": "boolean",
    "log-format": "string",
    "log-file": "string",
    "model-store": "string",
    "model-repository": "string",
    "exit-on-error": "boolean",
    "disable-auto-complete-config": "",
    "strict-readiness": "boolean",
    "model-control-mode": "string",
    "repository-poll-secs": "integer",
    "load-model": "string",
    "model-config-name": "string",
    "model-load-thread-count": "integer",
    "model-load-retry-count": "integer",
    "model-namespacing": "boolean",
    "enable-peer-access": "boolean",
    "allow-http": "boolean",
    "http-address": "string",
    "http-port": "integer",
    "reuse-http-port": "boolean",
    "http-header-forward-pattern": "string",
    "http-thread-count": "integer",
    "http-restricted-api": "<string>:<string>=<string>",
    "allow-grpc": "boolean",
    "grpc-address": "string",
    "grpc-port": "integer",
    "reuse-grpc-port": "boolean",
    "grpc-header-forward-pattern": "string",
    "grpc-infer-allocation-pool-size": "integer",
    "grpc-use-ssl": "boolean",
    "grpc-use-ssl-mutual": "boolean",
    "grpc-server-cert": "string",
    "grpc-server-key": "string",
    "grpc-root-cert": "string",
    "grpc-infer-response-compression-level": "string",
    "grpc-keepalive-time": "integer",
    "grpc-keepalive-timeout": "integer",
    "grpc-keepalive-permit-without-calls": "boolean",
    "grpc-http2-max-pings-without-data": "integer",
    "grpc-http2-min-recv-ping-interval-without-data": "integer",
    "grpc-http2-max-ping-strikes": "integer",
    "grpc-max-connection-age": "integer",
    "grpc-max-connection-age-grace": "integer",
    "grpc-restricted-protocol": "<string>:<string>=<string>",
    "allow-sagemaker": "boolean",
    "sagemaker-port": "integer",
    "sagemaker-safe-port-range": "<integer>-<integer>",
    "sagemaker-thread-count": "integer",
    "allow-vertex-ai": "boolean",
    "vertex-ai-port": "integer",
    "vertex-ai-thread-count": "integer",
    "vertex-ai-default-model": "string",
    "allow-metrics": "boolean",
    "allow-gpu-metrics": "boolean",
    "allow-cpu-metrics": "boolean",
    "metrics-address": "string",
    "metrics-port": "integer",
    "metrics-interval-ms": "float",
    "metrics-config": "<string>=<string>",
    "trace-config": "<string>,<string>=<string>",
    "backend-directory": "string",
    "backend-config": "<string>,<string>=<string>",
    "repoagent-directory": "string",
    "cache-config": "<string>,<string>=<string>",
    "cache-directory": "string",
    "rate-limit": "string",
    "rate-limit-resource": "<string>:<integer>:<integer>",
    "pinned-memory-pool-byte-size": "integer",
    "cuda-memory-pool-byte-size": "<integer>:<integer>",
    "cuda-virtual-address-size": "<integer>:<integer>",
    "min-supported-compute-capability": "float",
    "buffer-manager-thread-count": "integer",
    "host-policy": "<string>,<string>=<string>",
    "model-load-gpu-limit": "<device_id>:<fraction>",
    "strict-model-config": "boolean",
    "response-cache-byte-size": "integer",
    "trace-file": "string",
    "trace-level": "string",
    "trace-rate": "integer",
    "trace-count": "integer",
    "trace-log-frequency": "integer",
}
# two names of one option: getopt_long does not call a prefix of both ambiguous
ALIASES = {"model-store": "model-repository"}

# options the operator sets on every pod (kube/manifests.py triton_args), or that break the pod it runs:
# spec.server.args may not give them
RESERVED: dict[str, str] = {
    "model-repository": "tritonpipeline sets it to the repository it assembles",
    "http-port": "tritonpipeline sets it (the Service, the probes and the HTTP routes use it)",
    "grpc-port": "tritonpipeline sets it (the Service, the endpoint and the gRPC routes use it)",
    "metrics-port": "tritonpipeline sets it (the Service's metrics port, scraped for autoscaling)",
    "allow-metrics": "tritonpipeline sets it (autoscaling and monitoring read the metrics)",
    "allow-gpu-metrics": "tritonpipeline sets it from spec.server.gpus",
    "strict-readiness": "tritonpipeline sets it (the readiness probe relies on it)",
    "allow-http": "the probes and the HTTP routes need the HTTP endpoint",
    "allow-grpc": "the pipeline's endpoint is the gRPC port",
    "help": "tritonserver would print its usage and exit instead of serving",
    "http-restricted-api": "tritonpipeline restricts the administrative APIs to the pipeline's admin key "
    "(spec.server.adminKeySecretRef names its Secret)",
    "grpc-restricted-protocol": "tritonpipeline restricts the administrative APIs to the pipeline's admin "
    "key (spec.server.adminKeySecretRef names its Secret)",
}
# options `tritonpipeline serve` sets itself: given in spec.server.args, serve leaves them out (and says so)
SET_BY_SERVE: dict[str, str] = {
    "http-address": "serve binds --host",
    "grpc-address": "serve binds --host",
    "metrics-address": "serve binds --host",
    "backend-directory": "serve uses the backends of the nvidia-pytriton wheel",
    "exit-timeout-secs": "serve sets it from --exit-timeout",
}

_BOOLEANS = ("true", "false", "on", "off", "1", "0")  # tritonserver's ParseBoolOption, any case
_INTEGER = re.compile(r"\s*[+-]?[0-9]")  # std::stoi: leading blanks, a sign, a digit
_FLOAT = re.compile(r"\s*[+-]?(\.?[0-9]|inf|nan)", re.IGNORECASE)  # std::stod


@dataclass(frozen=True)
class Flag:
    """One option as tritonserver reads it: `index` of its list item, the full option name, its value."""

    index: int
    option: str
    value: str | None

    @property
    def text(self) -> str:
        return f"--{self.option}" if self.value is None else f"--{self.option}={self.value}"


@dataclass(frozen=True)
class ArgProblem:
    """A list item tritonserver would refuse, or one that overrides a reserved option."""

    index: int
    message: str


def resolve(name: str) -> str:
    """The option a (possibly abbreviated) long name means, as getopt_long picks it. Raises ValueError
    for an unknown name or an ambiguous prefix."""
    if name in OPTIONS:
        return ALIASES.get(name, name)
    found = sorted({ALIASES.get(o, o) for o in OPTIONS if o.startswith(name)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise ValueError(f"tritonserver has no option --{name}")
    shown = ", ".join(f"--{o}" for o in found[:6]) + (", ..." if len(found) > 6 else "")
    raise ValueError(f"--{name} is ambiguous for tritonserver (it could be {shown}); write the full name")


def _value_problem(option: str, value: str) -> str | None:
    kind = OPTIONS[option]
    if kind == "boolean" and value.lower() not in _BOOLEANS:
        return f"--{option} takes a boolean (true/false, on/off, 1/0), got {value!r}"
    if kind == "integer" and not _INTEGER.match(value):
        return f"--{option} takes an integer, got {value!r}"
    if kind == "float" and not _FLOAT.match(value):
        return f"--{option} takes a number, got {value!r}"
    return None


def _spaced(arg: str, name: str) -> str:
    head = name.split()[0]
    message = (
        f"{arg!r} is one argument with a space inside: tritonserver reads it as an unknown option; "
        f"write '--{head}=VALUE' or give the value as the next list item"
    )
    try:
        option = resolve(head)
    except ValueError:
        return message
    return f"{message} (and --{option} {_reserved_text(option)})" if option in RESERVED else message


def _reserved_text(option: str) -> str:
    return f"cannot be given in server.args: {RESERVED[option]}"


def parse(args: Sequence[str]) -> tuple[list[Flag], list[ArgProblem]]:
    """Read args as tritonserver's getopt_long does. Returns the options found and what tritonserver
    would refuse (unknown or ambiguous options, missing or unexpected values, bad booleans and numbers,
    stray arguments); reserved options are not judged here (see `problems`)."""
    flags: list[Flag] = []
    problems: list[ArgProblem] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            what = "'--' ends tritonserver's options" if arg == "--" else f"{arg!r} is not a --option"
            problems.append(ArgProblem(i, f"{what}; tritonserver refuses any argument that is not an option"))
            i += 1
            continue
        name, eq, value = arg[2:].partition("=")
        if any(c.isspace() for c in name):
            problems.append(ArgProblem(i, _spaced(arg, name)))
            i += 1
            continue
        try:
            option = resolve(name)
        except ValueError as exc:
            problems.append(ArgProblem(i, str(exc)))
            i += 1
            continue
        start = i
        if OPTIONS[option] == "":
            if eq:
                problems.append(ArgProblem(i, f"--{option} takes no value, got {value!r}"))
            flags.append(Flag(start, option, None))
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                problems.append(ArgProblem(i, f"--{option} needs a value: --{option}=VALUE"))
                break
            i += 1
            value = args[i]
        bad = _value_problem(option, value)
        if bad:
            problems.append(ArgProblem(start, bad))
        flags.append(Flag(start, option, value))
        i += 1
    return flags, problems


def problems(args: Sequence[str]) -> list[ArgProblem]:
    """Everything wrong with spec.server.args: what tritonserver refuses, and reserved options."""
    flags, found = parse(args)
    for flag in flags:
        if flag.option in RESERVED:
            written = args[flag.index].partition("=")[0]
            alias = "" if written == f"--{flag.option}" else f" ({written} means --{flag.option})"
            found.append(
                ArgProblem(
                    flag.index,
                    f"--{flag.option}{alias} {_reserved_text(flag.option)}",
                )
            )
    return sorted(found, key=lambda p: p.index)


def for_serve(args: Sequence[str]) -> tuple[list[str], list[tuple[Flag, str]]]:
    """spec.server.args for a local `serve`: (the list items to pass, each option left out and why).
    Expects args that passed `problems`."""
    flags, _ = parse(args)
    keep: list[str] = []
    left_out: list[tuple[Flag, str]] = []
    for n, flag in enumerate(flags):
        end = flags[n + 1].index if n + 1 < len(flags) else len(args)
        if flag.option in SET_BY_SERVE:
            left_out.append((flag, SET_BY_SERVE[flag.option]))
        else:
            keep += args[flag.index : end]
    return keep, left_out


def auto_complete_off(args: Sequence[str]) -> str | None:
    """The list item that turns off Triton's completion of model configs (the backend fills in what a
    config leaves out, such as a vLLM or Python model's inputs and outputs), or None when it is on, as
    tritonserver decides: `--disable-auto-complete-config` anywhere, else the last
    `--strict-model-config` (deprecated) being true."""
    flags, _ = parse(args)
    disable = [f for f in flags if f.option == "disable-auto-complete-config"]
    if disable:
        return args[disable[0].index]
    strict = [f for f in flags if f.option == "strict-model-config"]
    if strict and (strict[-1].value or "").lower() in ("true", "on", "1"):
        written = args[strict[-1].index]
        return written if "=" in written else f"{written} {strict[-1].value}"
    return None


def rate_limit_mode(args: Sequence[str]) -> str:
    """The rate limiter's mode as tritonserver reads `args`: the last `--rate-limit` (`off` without one;
    `off` ignores every instance group's rate_limiter)."""
    flags, _ = parse(args)
    modes = [f.value for f in flags if f.option == "rate-limit"]
    return (modes[-1] or "off") if modes else "off"


def response_cache_on(args: Sequence[str]) -> bool:
    """Whether tritonserver runs with a response cache as `args` configure it: a `--cache-config`, or
    the deprecated `--response-cache-byte-size`, its last value, above 0 (a model's response_cache
    caches nothing otherwise). tritonserver refuses the two flags together."""
    flags, _ = parse(args)
    if any(f.option == "cache-config" for f in flags):
        return True
    sizes = [(f.value or "").strip() for f in flags if f.option == "response-cache-byte-size"]
    return bool(sizes) and sizes[-1].isdigit() and int(sizes[-1]) > 0


def host_policies(args: Sequence[str]) -> set[str]:
    """The host policies `args` define: the NAME of each `--host-policy=NAME,SETTING=VALUE` (an instance
    group's host_policy that none defines runs with no settings)."""
    flags, _ = parse(args)
    return {(f.value or "").split(",", 1)[0] for f in flags if f.option == "host-policy" and f.value}
