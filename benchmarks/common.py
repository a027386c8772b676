"""The names ``benchmarks.common`` had before :mod:`benchmarks.harness`, for scripts written against it.

New code imports from the harness modules; this module only forwards (the lead may drop it once no
script on any branch imports it).
"""

from benchmarks.harness.load import (
    CpuLoad,
    LoadResult,
    grpc_load,
    infer_request_bytes,
    load_with_cpu,
    load_with_server_cpu,
)
from benchmarks.harness.processes import (
    cpu_seconds,
    own_libpython_for_triton,
    peak_rss_mb,
    site_paths,
    steady_malloc,
)
from benchmarks.harness.report import RESULTS, machine, save

__all__ = [
    "RESULTS",
    "CpuLoad",
    "LoadResult",
    "cpu_seconds",
    "grpc_load",
    "infer_request_bytes",
    "load_with_cpu",
    "load_with_server_cpu",
    "machine",
    "own_libpython_for_triton",
    "peak_rss_mb",
    "save",
    "site_paths",
    "steady_malloc",
]
