"""The operator process's memory allocator settings (glibc only; elsewhere nothing is changed)."""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt's parameter number for the most malloc arenas (glibc's malloc.h: M_ARENA_MAX)
M_ARENA_MAX = -8
# glibc gives each thread that allocates while another holds an arena an arena of its own, up to
# eight per core; each keeps the memory it once held. The operator's API threads (runtime/state.py)
# each decode and build large objects now and then, so its resident memory grew by a few such arenas
# after every pass (bench-controlplane's restart and idle scenarios: 155 MB at the default, 141 MB
# with two). Two arenas: threads rarely wait on each other's allocations here (Python's GIL already
# serializes them).
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (call before the threads start); False where the C
    library is not glibc or refuses (nothing changed)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version.restype = ctypes.c_char_p  # glibc's alone: musl has no such symbol
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
