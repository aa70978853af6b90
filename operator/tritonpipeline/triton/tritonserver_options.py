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
import sys
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

# options the operator sets on every pod (render/manifests.py triton_args), or that break the pod it runs:
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
# the options of Triton's tracing (spec.server.tracing renders them: compiler/tracing.py)
TRACE_OPTIONS = frozenset(
    {"trace-config", "trace-file", "trace-level", "trace-rate", "trace-count", "trace-log-frequency"}
)

SET_BY_SERVE: dict[str, str] = {
    "http-address": "serve binds --host",
    "grpc-address": "serve binds --host",
    "metrics-address": "serve binds --host",
    "backend-directory": "serve uses the backends of the nvidia-pytriton wheel",
    "exit-timeout-secs": "serve sets it from --exit-timeout",
}

_BOOLEANS = ("true", "false", "on", "off", "1", "0")  # tritonserver's ParseBoolOption, any case


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


# --------------------------------------------------------------------------- values
# What tritonserver's parser (2.51, the wheel's binary; tests/component/test_server_args.py holds each rule
# to its verdicts) accepts as an option's value. Numbers are read by std::stoi/stoll/stoull/stod: leading
# blanks, a sign, at least one digit, anything after the number ignored ("5abc" is 5), out of the type's range
# refused. `--help` writes `integer` for every whole number and `float` for --metrics-interval-ms, which
# the binary reads as an int.

_BLANKS = " \t\n\v\f\r"  # C's isspace
_WHOLE = re.compile(r"[+-]?([0-9]+)")
_DECIMAL = re.compile(r"[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)")
_HEX = re.compile(r"[+-]?0[xX](([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?[0-9]+)?)")
_SPECIAL = re.compile(r"[+-]?(inf(inity)?|nan(\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
UINT64 = (-((1 << 64) - 1), (1 << 64) - 1)  # stoull takes a minus sign and wraps the value round
# options whose number is not an int (std::stoi)
NUMBER_TYPES: dict[str, str] = {
    "pinned-memory-pool-byte-size": "int64",
    "response-cache-byte-size": "int64",
    "min-supported-compute-capability": "double",
    "metrics-interval-ms": "int",
}
# options that take one of a few words: the words, and whether their case matters
CHOICES: dict[str, tuple[tuple[str, ...], bool]] = {
    "model-control-mode": (("none", "poll", "explicit"), False),
    "rate-limit": (("execution_count", "off"), False),
    "grpc-infer-response-compression-level": (("none", "low", "medium", "high"), False),
    "log-format": (("default", "ISO8601"), True),
    "trace-level": (("off", "false", "timestamps", "tensors", "on", "true", "min", "max"), False),
}
TRACE_MODES = ("triton", "opentelemetry")
# --NAME=<first>DELIM<second>: the delimiter, and each part's name and number type
PAIRS: dict[str, tuple[str, tuple[str, str], tuple[str, str]]] = {
    "cuda-memory-pool-byte-size": (":", ("GPU", "int"), ("bytes", "uint64")),
    "cuda-virtual-address-size": (":", ("GPU", "int"), ("bytes", "uint64")),
    "model-load-gpu-limit": (":", ("GPU", "int"), ("fraction", "double")),
    "sagemaker-safe-port-range": ("-", ("lowest port", "int"), ("highest port", "int")),
}
# --NAME=[<name>,]<setting>=<value>: whether the name is required, absent, or either
SETTINGS: dict[str, tuple[str, str]] = {  # option -> (name: required/none/optional, what a name is)
    "backend-config": ("optional", "backend name"),
    "cache-config": ("required", "cache name"),
    "host-policy": ("required", "policy name"),
    "metrics-config": ("none", ""),
    "trace-config": ("optional", "trace mode"),
}
RATE_LIMIT_RESOURCE_FORM = "'<resource name>:<count>' or '<resource name>:<count>:<device>'"
NOT_A_NUMBER = "--{option} takes {kind}, got {value!r}"
OUT_OF_RANGE = "--{option} takes {kind} from {low} to {high}, got {value!r} (tritonserver: 'out of bound')"
DOUBLE_OUT_OF_RANGE = (
    "--{option} takes a number a double holds (at most about 1.8e308, 0 or at least about 2.2e-308 "
    "in size), got {value!r} (tritonserver: 'out of bound')"
)
NOT_A_CHOICE = "--{option} takes one of {choices}{case}, got {value!r}"
PAIR_FORM = "--{option} takes '<{first}>{delim}<{second}>', got {value!r}"
SETTING_FORM = "--{option} takes {form}, got {value!r}"
EMPTY_VALUE = "--{option} takes a non-empty value"
TRACE_MODE_UNKNOWN = "--trace-config: trace mode {mode!r} is none of {modes}"
TRACE_SETTING = "--trace-config={value!r}: {setting} takes {what}"
BOTH_CACHE_FLAGS = (
    "--response-cache-byte-size and --cache-config (spec.server.args[{other}]) are both given: tritonserver "
    "refuses them together ('Incompatible flags'); give --cache-config=local,size=BYTES only"
)
LOAD_MODEL_WITHOUT_EXPLICIT = (
    "--load-model needs --model-control-mode=explicit (tritonserver refuses it otherwise: 'Use of "
    "'--load-model' requires setting '--model-control-mode=explicit' as well')"
)
_RANGES = {"int": INT32, "int64": INT64, "uint64": UINT64}


def whole_number(text: str) -> int | None:
    """The integer std::stoll reads at the start of `text` (blanks, a sign, digits; the rest ignored),
    or None."""
    found = _WHOLE.match(text.lstrip(_BLANKS))
    return int(found.group(0)) if found else None


def number_problem(text: str, kind: str) -> str | None:
    """Why std::sto* refuses `text` as a `kind` (int, int64, uint64, double): 'not a number' or
    'out of range'; None when it reads a number."""
    body = text.lstrip(_BLANKS)
    if kind != "double":
        value = whole_number(body)
        if value is None:
            return "not a number"
        low, high = _RANGES[kind]
        return None if low <= value <= high else "out of range"
    if _SPECIAL.match(body):
        return None
    hexa, decimal = _HEX.match(body), _DECIMAL.match(body)
    if hexa is None and decimal is None:
        return "not a number"
    if hexa is not None:
        mantissa, _, exponent = hexa.group(1).lower().partition("p")
        whole, _, fraction = mantissa.partition(".")
        digits = (whole + fraction).lstrip("0")
        try:
            number = float.fromhex(f"0x{whole or 0}.{fraction or 0}p{exponent or 0}")
        except OverflowError:
            return "out of range"
    else:
        assert decimal is not None
        digits = re.sub(r"[eE].*", "", decimal.group(1)).replace(".", "").lstrip("0")
        number = float(decimal.group(1))
    if number in (float("inf"), float("-inf")):
        return "out of range"
    if digits and abs(number) < sys.float_info.min:  # underflow: glibc's strtod says ERANGE
        return "out of range"
    return None


def _number_text(option: str, value: str, kind: str, what: str | None = None) -> str | None:
    why = number_problem(value, kind)
    if why is None:
        return None
    name = "a number" if kind == "double" else "an integer"
    named = option if what is None else f"{option} {what}"
    if why == "not a number":
        return NOT_A_NUMBER.format(option=named, kind=name, value=value)
    if kind == "double":
        return DOUBLE_OUT_OF_RANGE.format(option=named, value=value)
    low, high = _RANGES[kind]
    return OUT_OF_RANGE.format(option=named, kind=name, low=low, high=high, value=value)


def _choice_text(option: str, value: str) -> str | None:
    choices, exact = CHOICES[option]
    if value in choices or (not exact and value.lower() in choices):
        return None
    case = " (this case)" if exact else " (any case)"
    return NOT_A_CHOICE.format(option=option, choices=", ".join(choices), case=case, value=value)


def _pair_text(option: str, value: str) -> str | None:
    delim, (first, first_kind), (second, second_kind) = PAIRS[option]
    at = value.find(delim)
    if at < 0:
        return PAIR_FORM.format(option=option, first=first, delim=delim, second=second, value=value)
    for part, what, kind in ((value[:at], first, first_kind), (value[at + 1 :], second, second_kind)):
        problem = _number_text(option, part, kind, what)
        if problem:
            return problem
    return None


def setting_parts(option: str, value: str) -> tuple[str | None, str, str] | None:
    """(name or None, setting, value) of a `[<name>,]<setting>=<value>` option as tritonserver splits it
    (the name ends at the first comma, the setting at the first `=` after it); None when it refuses it."""
    need, _ = SETTINGS[option]
    if need == "none":
        at_eq = value.find("=")
        if at_eq < 0 or "," in value[:at_eq]:
            return None
        name, setting, rest = None, value[:at_eq], value[at_eq + 1 :]
    else:
        at_comma = value.find(",")
        if at_comma == 0 or (at_comma < 0 and need == "required"):
            return None
        at_eq = value.find("=", at_comma + 1)
        if at_eq < 0:
            return None
        name = value[:at_comma] if at_comma > 0 else None
        setting, rest = value[at_comma + 1 : at_eq], value[at_eq + 1 :]
    return (name, setting, rest) if setting and rest else None


def _setting_text(option: str, value: str) -> str | None:
    need, what = SETTINGS[option]
    form = {
        "none": "'<setting>=<value>'",
        "required": f"'<{what}>,<setting>=<value>'",
        "optional": f"'<{what}>,<setting>=<value>' or '<setting>=<value>'",
    }[need]
    parts = setting_parts(option, value)
    if parts is None:
        return SETTING_FORM.format(option=option, form=form, value=value)
    if option == "trace-config" and parts[0] is not None and parts[0].lower() not in TRACE_MODES:
        return TRACE_MODE_UNKNOWN.format(mode=parts[0], modes=", ".join(TRACE_MODES))
    return None


def _rate_limit_resource_text(option: str, value: str) -> str | None:
    parts = value.split(":")
    if len(parts) not in (2, 3):
        return SETTING_FORM.format(option=option, form=RATE_LIMIT_RESOURCE_FORM, value=value)
    for part, what in zip(parts[1:], ("count", "device"), strict=False):
        problem = _number_text(option, part, "int", what)
        if problem:
            return problem
    return None


def _value_problem(option: str, value: str) -> str | None:
    kind = OPTIONS[option]
    if kind == "boolean" and value.lower() not in _BOOLEANS:
        return f"--{option} takes a boolean (true/false, on/off, 1/0), got {value!r}"
    if option == "log-verbose" and value.lower() in ("true", "false"):
        return None  # tritonserver's ParseIntBoolOption: true is 1, false 0
    if option in CHOICES:
        return _choice_text(option, value)
    if option in PAIRS:
        return _pair_text(option, value)
    if option in SETTINGS:
        return _setting_text(option, value)
    if option == "rate-limit-resource":
        return _rate_limit_resource_text(option, value)
    if option == "model-config-name" and not value:
        return EMPTY_VALUE.format(option=option)
    if kind in ("integer", "float"):
        return _number_text(option, value, NUMBER_TYPES.get(option, "int"))
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


def _trace_setting_text(flag: Flag) -> str | None:
    """What tritonserver refuses of a --trace-config setting once every option is read: a global level,
    mode, rate or count, and the triton mode's log-frequency."""
    parts = setting_parts("trace-config", flag.value or "")
    if parts is None:
        return None  # refused as it is read
    name, setting, value = parts
    what: str | None = None
    if name is None and setting == "level" and value.lower() not in CHOICES["trace-level"][0]:
        what = f"one of {', '.join(CHOICES['trace-level'][0])} (any case)"
    elif name is None and setting == "mode" and value.lower() not in TRACE_MODES:
        what = f"one of {', '.join(TRACE_MODES)} (any case)"
    elif (name is None and setting in ("rate", "count")) or (
        name is not None and name.lower() == "triton" and setting == "log-frequency"
    ):
        problem = number_problem(value, "int")
        what = f"an integer ({problem})" if problem else None
    return TRACE_SETTING.format(value=flag.value, setting=setting, what=what) if what else None


def _combination_problems(flags: Sequence[Flag]) -> list[ArgProblem]:
    """What tritonserver refuses once it has read every option: a --trace-config setting's value, the
    two response-cache flags together, --load-model without explicit model control."""
    found = [
        ArgProblem(f.index, text)
        for f in flags
        if f.option == "trace-config" and (text := _trace_setting_text(f)) is not None
    ]
    sizes = [f for f in flags if f.option == "response-cache-byte-size"]
    configs = [f for f in flags if f.option == "cache-config"]
    if sizes and configs:
        found.append(ArgProblem(sizes[0].index, BOTH_CACHE_FLAGS.format(other=configs[0].index)))
    loads = [f for f in flags if f.option == "load-model"]
    modes = [(f.value or "").lower() for f in flags if f.option == "model-control-mode"]
    if loads and (not modes or modes[-1] != "explicit"):
        found.append(ArgProblem(loads[0].index, LOAD_MODEL_WITHOUT_EXPLICIT))
    return found


def problems(args: Sequence[str]) -> list[ArgProblem]:
    """Everything wrong with spec.server.args: what tritonserver refuses, and reserved options."""
    flags, found = parse(args)
    if not found:
        found = _combination_problems(flags)
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


def models_loaded(args: Sequence[str]) -> set[str] | None:
    """The models tritonserver loads at start as `args` say: None for all of the repository (model
    control none or poll, the default; or --load-model=*), else the names --load-model gives under
    --model-control-mode=explicit (an ensemble brings its steps)."""
    flags, _ = parse(args)
    modes = [(f.value or "").lower() for f in flags if f.option == "model-control-mode"]
    names = {f.value or "" for f in flags if f.option == "load-model"}
    return None if not modes or modes[-1] != "explicit" or "*" in names else names


def rate_limit_mode(args: Sequence[str]) -> str:
    """The rate limiter's mode as tritonserver reads `args`: the last `--rate-limit` (`off` without one;
    `off` ignores every instance group's rate_limiter)."""
    flags, _ = parse(args)
    modes = [(f.value or "").lower() for f in flags if f.option == "rate-limit"]  # any case, as it reads them
    return (modes[-1] or "off") if modes else "off"


def response_cache_on(args: Sequence[str]) -> bool:
    """Whether tritonserver runs with a response cache as `args` configure it: a `--cache-config`, or
    the deprecated `--response-cache-byte-size`, its last value, above 0 (a model's response_cache
    caches nothing otherwise). tritonserver refuses the two flags together."""
    flags, _ = parse(args)
    if any(f.option == "cache-config" for f in flags):
        return True
    sizes = [whole_number(f.value or "") for f in flags if f.option == "response-cache-byte-size"]
    return bool(sizes) and (sizes[-1] or 0) > 0


def host_policies(args: Sequence[str]) -> set[str]:
    """The host policies `args` define: the NAME of each `--host-policy=NAME,SETTING=VALUE` (an instance
    group's host_policy that none defines runs with no settings)."""
    flags, _ = parse(args)
    return {(f.value or "").split(",", 1)[0] for f in flags if f.option == "host-policy" and f.value}
