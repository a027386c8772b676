"""``sonic.server.malloc``: ``sonic serve``'s fixed mmap threshold keeps large buffers on the heap.

Each check runs in a child interpreter: the threshold is the process's, and the test process keeps its
own allocator as it was."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from sonic.server.malloc import fix_mmap_threshold

pytestmark = pytest.mark.unit

glibc_only = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)

# Where a 40 MiB block lands: on the heap ([heap] in /proc/self/maps), or in a mapping of its own.
# 40 MiB is above glibc's largest dynamic threshold (32 MiB), so glibc alone always maps it afresh.
_WHERE_40_MIB_LANDS = """
import ctypes, sys
from pathlib import Path
from sonic.cli.main import build_parser
from sonic.cli.serve_budget import apply_malloc_threshold
args = build_parser().parse_args(["serve", "--model-repository", ".", *sys.argv[1:]])
outcome = apply_malloc_threshold(args)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
address = libc.malloc(40 << 20)
for line in Path("/proc/self/maps").read_text().splitlines():
    span, *rest = line.split()
    start, end = (int(x, 16) for x in span.split("-"))
    if start <= address < end:
        print(outcome.value if outcome else "glibc's own", "heap" if rest[-1] == "[heap]" else "mapping")
libc.free(address)
"""


def _where(*flags: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _WHERE_40_MIB_LANDS, *flags], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@glibc_only
def test_the_default_keeps_a_40_mib_buffer_on_the_heap() -> None:
    assert _where() == "fixed heap"
    assert _where("--malloc-mmap-threshold-mb", "64") == "fixed heap"


@glibc_only
def test_zero_leaves_glibc_its_own_threshold_and_a_lower_one_maps() -> None:
    assert _where("--malloc-mmap-threshold-mb", "0") == "glibc's own mapping"
    assert _where("--malloc-mmap-threshold-mb", "16") == "fixed mapping"


def test_a_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="mmap threshold must be positive, got 0 bytes"):
        fix_mmap_threshold(0)
