"""What a benchmark reads of a process (CPU time, peak RSS, from /proc) and sets in one (steady malloc;
the environment Triton's Python-backend stub needs)."""

from __future__ import annotations

import os
import site
import sysconfig
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.server.malloc import MallocSetting, fix_mmap_threshold


def steady_malloc(threshold_bytes: int = 64 << 20) -> bool:
    """Keep this process's large allocations on the heap (glibc), so load generators measure steadily.

    A load generator receiving 15.6 MB responses allocates 15.6 MB per request. glibc serves that with a
    fresh mmap (page faults and kernel zeroing of every page: ~2x the time per request here) until its
    dynamic threshold happens to rise past the size, so the same run measured ~400 or ~900 MB/s depending
    on what the process had freed before. Fixing the thresholds takes the chance out, for every server
    alike (``sonic serve`` fixes its own the same way: ``sonic.server.malloc``). Returns False where it
    cannot be set (not glibc).
    """
    return fix_mmap_threshold(threshold_bytes) is MallocSetting.FIXED


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads (children not included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU time of each thread of a process, by thread id (the main thread's is ``pid``)."""
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    times = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        times[int(task.name)] = (int(fields[11]) + int(fields[12])) * tick_s
    return times


def memcpy_floor_s(array: npt.NDArray[Any]) -> float:
    """One copy of a request tensor in and one of the response out (``np.copyto``, the least of 15, CPU time
    of this thread): the least a server that touches the bytes at all spends, measured now, beside the server
    it is set against (``benchmarks.compare`` and ``benchmarks.server_ab`` both weigh transfers by it). The
    least, not the median: a copy into pages not yet touched, or one interrupted, is not the floor (the
    median gave 3.6 ms and 1.5 ms for the same tensor in one run)."""
    target = np.empty_like(array)
    times = []
    for _ in range(15):
        start = time.thread_time()
        np.copyto(target, array)
        np.copyto(target, array)
        times.append(time.thread_time() - start)
    return min(times)


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its living descendants (Triton's Python-backend stubs)."""
    total = cpu_seconds(pid)
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            total += tree_cpu_seconds(int(child))
    return total


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the process's peak resident set size."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def site_paths() -> list[str]:
    """This environment's site-packages: put first on ``sys.path`` by a model of Triton's Python
    backend, whose stub runs a bare interpreter that ignores the venv."""
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    return list(dict.fromkeys(paths))


def own_libpython_for_triton() -> None:
    """The Python-backend stub links libpython: point it (through this process's environment, which
    Triton's launcher copies) at this interpreter's own."""
    libdir = sysconfig.get_config_var("LIBDIR")
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (libdir, os.environ.get("LD_LIBRARY_PATH")) if p
    )
