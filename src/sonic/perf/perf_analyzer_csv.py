"""``sonic perf -f FILE --csv-format perf_analyzer``: perf_analyzer 2.51's ``-f`` CSV, column for column.

Tools written for perf_analyzer's file (model-analyzer's reports, sites' plotting scripts) read this one
unchanged. The header and the arithmetic follow perf_analyzer's ``ReportWriter::GenerateReport``: every
time is whole microseconds, truncated from whole nanoseconds; rows are sorted by increasing
inferences/s; the server columns appear only when the server keeps statistics, the cache columns only
when the model's config enables the response cache; ``--verbose-csv`` adds ``Avg latency``,
``request/response`` and ``response wait``.

How sonic perf's figures fill perf_analyzer's columns:

- ``Client Send`` is the serialize time per request (sonic perf serializes its requests once, before the
  load, and replays the bytes); ``Client Recv`` the mean parse time of a response.
- perf_analyzer's latency runs from before the request is marshalled to after the response is
  unmarshalled; sonic perf's runs from the send to the last byte of the response. ``Avg latency`` and
  the percentiles therefore add the mean ``Client Send`` and ``Client Recv`` to the measured figures,
  so that, as in perf_analyzer, response wait = latency - send - receive.
- ``Network+Server Send/Recv`` is the response wait less the server's queue and compute times (each
  averaged over its own count, as perf_analyzer does), never below zero: the network, the front end and
  whatever the server does outside queue and compute.
- ``Response Throughput`` (decoupled models) and the GPU columns of ``--collect-metrics`` never appear:
  sonic perf sends unary requests and reads no GPU metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sonic.perf.engine import LevelResult, PerfReport
from sonic.perf.stats import PhaseAverages

SERVER_COLUMNS = (
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
)
CACHE_COLUMNS = ("Server Cache Hit", "Server Cache Miss")
PERCENTILE_COLUMNS = ("p50 latency", "p90 latency", "p95 latency", "p99 latency")
VERBOSE_COLUMNS = ("Avg latency", "request/response", "response wait")


def header(*, concurrency: bool, server_stats: bool, response_cache: bool, verbose: bool) -> list[str]:
    columns = ["Concurrency" if concurrency else "Request Rate", "Inferences/Second", "Client Send"]
    if server_stats:
        columns += SERVER_COLUMNS
        if response_cache:
            columns += CACHE_COLUMNS
    columns += ["Client Recv", *PERCENTILE_COLUMNS]
    if verbose:
        columns += VERBOSE_COLUMNS
    return columns


def _number(value: float) -> str:
    """A double as C++'s default ostream writes it: six significant digits, like printf's %g."""
    return f"{value:g}"


def _ns(microseconds: float) -> int:
    return round(microseconds * 1000)


def _server_cells(wait_ns: int, phases: PhaseAverages, response_cache: bool) -> list[int]:
    accounted_ns = phases.queue_ns + phases.compute_ns + phases.cache_hit_ns + phases.cache_miss_ns
    network_ns = max(0, wait_ns - accounted_ns)  # two clocks subtracted: capped at zero, as perf_analyzer
    cells = [network_ns, phases.queue_ns, phases.compute_input_ns, phases.compute_infer_ns]
    cells.append(phases.compute_output_ns)
    if response_cache:
        cells += [phases.cache_hit_ns, phases.cache_miss_ns]
    return [ns // 1000 for ns in cells]


def row(result: LevelResult, *, server_stats: bool, response_cache: bool, verbose: bool) -> list[str]:
    level, latency = result.level, result.latency
    send_ns, recv_ns = _ns(result.client_serialize_us), _ns(result.client_deserialize_us)
    wait_ns = _ns(latency.mean_us)  # sonic perf's own latency: send to the response's last byte
    latency_ns = wait_ns + send_ns + recv_ns
    cells = [str(level.concurrency) if level.concurrency else _number(level.request_rate_per_s)]
    cells += [_number(result.inferences_per_s), str(send_ns // 1000)]
    if server_stats:
        assert result.server is not None  # server_stats is true only when every level has a breakdown
        cells += map(str, _server_cells(wait_ns, result.server.per_count, response_cache))
    cells.append(str(recv_ns // 1000))
    for percentile_us in (latency.p50_us, latency.p90_us, latency.p95_us, latency.p99_us):
        cells.append(str((_ns(percentile_us) + send_ns + recv_ns) // 1000))
    if verbose:
        latency_us, send_us, recv_us = latency_ns // 1000, send_ns // 1000, recv_ns // 1000
        cells += [str(latency_us), str(send_us + recv_us), str(latency_us - send_us - recv_us)]
    return cells


def lines(results: Sequence[LevelResult], *, response_cache: bool, verbose: bool) -> list[str]:
    """The file's lines: the header, then one row per level by increasing inferences/s."""
    if not results:
        return []
    server_stats = all(result.server is not None for result in results)
    options = {"server_stats": server_stats, "response_cache": response_cache, "verbose": verbose}
    concurrency = results[0].level.concurrency > 0
    ordered = sorted(results, key=lambda r: r.inferences_per_s)
    return [",".join(header(concurrency=concurrency, **options))] + [
        ",".join(row(result, **options)) for result in ordered
    ]


def write_perf_analyzer_csv(report: PerfReport, path: Path, *, verbose: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = lines(report.results, response_cache=report.model.response_cache, verbose=verbose)
    path.write_text("".join(line + "\n" for line in text), encoding="utf-8")
