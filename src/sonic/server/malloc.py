"""The process's allocator thresholds for large request buffers (glibc's ``M_MMAP_THRESHOLD``).

A large gRPC message is read into one buffer sized from its length prefix, and its response leaves from
another; both are freed when the request is done. glibc serves an allocation at or above its mmap
threshold with a fresh ``mmap`` and returns it with ``munmap`` on free, so every such request pays a page
fault per page (or per huge page: numpy asks for them on arrays of 4 MiB and more) and the kernel zeroing
the whole buffer. The threshold is dynamic by default: it rises to the size of the largest mmapped block
freed so far, but never past 32 MiB on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``). A server whose tensors
stay under 32 MiB reaches a steady state after its first large request; above it, every request maps and
zeroes fresh memory (a 40.5 MB tensor each way: ~720 page faults per request, docs/benchmarks.md
"2026-11-28: issue 37: large tensors").

:func:`fix_mmap_threshold` fixes the threshold (which also ends the dynamic adjustment) and the trim
threshold at twice it, so buffers under it are reused from the heap. What the process then keeps: at
most twice the threshold free at the top of the heap, plus whatever freed blocks lie between live ones
(bounded by the largest set of buffers ever live at once, which the request buffer budget bounds). Run
once by ``sonic serve`` before serving (``--malloc-mmap-threshold-mb``); never by an embedding process,
whose allocator is its own business.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
DEFAULT_MMAP_THRESHOLD_MB = 64


class MallocSetting(enum.Enum):
    """What :func:`fix_mmap_threshold` did."""

    FIXED = "fixed"
    NOT_GLIBC = "not glibc"  # no mallopt: another C library (musl), or none found
    REFUSED = "refused"  # glibc's mallopt returned 0 for the value


def fix_mmap_threshold(threshold_bytes: int) -> MallocSetting:
    """Fix glibc's mmap threshold at ``threshold_bytes`` and its trim threshold at twice that."""
    if threshold_bytes <= 0:
        raise ValueError(f"mmap threshold must be positive, got {threshold_bytes} bytes")
    name = ctypes.util.find_library("c")
    if name is None:
        return MallocSetting.NOT_GLIBC
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return MallocSetting.NOT_GLIBC
    if not libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes):
        return MallocSetting.REFUSED
    if not libc.mallopt(M_TRIM_THRESHOLD, 2 * threshold_bytes):
        return MallocSetting.REFUSED
    return MallocSetting.FIXED
