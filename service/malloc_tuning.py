"""glibc ``malloc`` settings for the service process, which moves bodies of up to ~50 MB.

Measured with ``make bench-memory``: with glibc's defaults the service's RSS stayed hundreds
of MB above what it held alive, because of glibc's dynamic mmap threshold and its one heap
arena per thread. :func:`tune_malloc` fixes both; it changes no behaviour, only where memory
comes from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

#: ``mallopt`` parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: Allocations above this many bytes are mapped (and unmapped when freed).
MMAP_THRESHOLD_BYTES = 128 * 1024
#: Freed memory at the top of a heap above this many bytes is given back.
TRIM_THRESHOLD_BYTES = 128 * 1024
#: Heap arenas shared by all threads.
ARENA_MAX = 2


def tune_malloc() -> bool:
    """Apply the settings above to this process's glibc malloc; ``False`` when the C
    library is not glibc (nothing changed). Call before the service allocates much.

    Why, with glibc's defaults:

    * the *dynamic* mmap threshold: once a large buffer (an HTTP body, a chunk of a
      response) allocated with ``mmap`` is freed, glibc raises the threshold to its size (up
      to 32 MB), so later buffers of that size come from the heap, and freed heap memory is
      rarely given back to the system;
    * one heap *arena* per thread, up to 8 per core: the round workers and the request
      threads each kept their own freed megabytes.

    So the threshold is fixed at :data:`MMAP_THRESHOLD_BYTES` (buffers above it are mapped
    and unmapped, so freeing one returns it to the system) and at most :data:`ARENA_MAX`
    arenas are allowed. ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` set in the
    environment win (glibc reads them at start; they are not overridden)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl has no such symbol
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = True
    for variable, param, value in (
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
        ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
    ):
        if variable not in os.environ:
            done = bool(mallopt(param, value)) and done
    if not done:
        log.warning("glibc mallopt refused a setting; memory use may be higher")
    return True
