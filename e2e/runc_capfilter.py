#!/usr/bin/env python3
"""runc minus the capabilities this host cannot give (e2e/docker_engine.py makes it dockerd's runtime).

A privileged container asks for every capability; where the capability bounding set lacks some (this
process's CapBnd), runc fails with "unable to apply caps: operation not permitted". This wrapper removes
those capabilities from the OCI spec runc is about to use, then execs the real runc with the same arguments:
  create / run    the bundle's config.json (--bundle/-b DIR, else the working directory): process.capabilities
  exec            the --process/-p FILE (`docker exec --privileged` writes one): its capabilities
Every other command passes through untouched.
"""

import json
import os
import shutil
import sys

# Linux capability numbers (include/uapi/linux/capability.h), for names the spec spells
NAMES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
]


RUNC_PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"


def allowed() -> set[str]:
    with open("/proc/self/status") as f:
        bnd = next(int(line.split()[1], 16) for line in f if line.startswith("CapBnd:"))
    return {f"CAP_{name}" for i, name in enumerate(NAMES) if bnd & (1 << i)}


def filter_caps(caps: dict[str, object], ok: set[str]) -> None:
    for key, values in list(caps.items()):
        if isinstance(values, list):
            caps[key] = [c for c in values if c in ok]


def rewrite(path: str, nested: bool) -> None:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return
    caps = (doc.get("process") or {}).get("capabilities") if nested else doc.get("capabilities")
    if not caps:
        return
    filter_caps(caps, allowed())
    tmp = path + ".capfilter"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def main() -> None:
    real = os.environ.get("CAPFILTER_RUNC") or shutil.which("runc", path=RUNC_PATH)
    args = sys.argv[1:]
    command = next((a for a in args if a in ("create", "run", "exec")), None)
    if command in ("create", "run"):
        rest = args[args.index(command) + 1 :]
        bundle = option(rest, "--bundle", "-b") or os.getcwd()
        rewrite(os.path.join(bundle, "config.json"), nested=True)
    elif command == "exec":
        rest = args[args.index(command) + 1 :]
        process = option(rest, "--process", "-p")
        if process:
            rewrite(process, nested=False)
    os.execv(real, [real, *args])


if __name__ == "__main__":
    main()
