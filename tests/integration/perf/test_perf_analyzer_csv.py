"""``sonic perf -f FILE --csv-format perf_analyzer`` against real perf_analyzer 2.51's ``-f`` file.

Both tools measure the same ``sonic serve`` in one test; the files must have the same header, the same
number of columns in every row, rows for the same levels sorted the same way (by increasing
inferences/s), and plausible figures in each.
"""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.cli.main import main
from sonic.launch import ServerProcess
from sonic.models.simple import IDENTITY_CONFIG, identity_model

from .conftest import PerfAnalyzer

pytestmark = pytest.mark.integration

QUICK_ARGS = ["--measurement-interval-s", "0.5", "--stable-windows", "2", "--max-windows", "3"]
QUICK_ARGS += ["--stability-percentage", "1000"]


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as handle:
        header, *rows = list(csv.reader(handle))
    return header, rows


def _check_rows(header: list[str], rows: list[list[str]], levels: set[str]) -> None:
    assert len(rows) == len(levels)
    assert all(len(r) == len(header) for r in rows), rows
    assert {r[0] for r in rows} == levels
    throughputs = [float(r[1]) for r in rows]
    assert all(t > 0 for t in throughputs)
    assert throughputs == sorted(throughputs)  # perf_analyzer sorts its summary by inferences/s
    column = {name: header.index(name) for name in header}
    for r in rows:
        assert all(int(cell) >= 0 for cell in r[2:])  # every time: whole microseconds
        p50, p90, p95, p99 = (int(r[column[f"p{q} latency"]]) for q in (50, 90, 95, 99))
        assert 0 < p50 <= p90 <= p95 <= p99
        if "Avg latency" in column:
            assert int(r[column["Avg latency"]]) > 0
            assert int(r[column["response wait"]]) > 0


@pytest.fixture(scope="module")
def cached_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``identity`` with ``response_cache { enable: true }`` behind a server with a response cache."""
    repository = tmp_path_factory.mktemp("perf-cached")
    identity_model(repository / "identity" / "1" / "model.onnx")
    config = IDENTITY_CONFIG.lstrip() + "response_cache { enable: true }\n"
    (repository / "identity" / "config.pbtxt").write_text(config)
    with ServerProcess.start([repository], extra_args=["--cache-size-bytes", str(16 << 20)]) as process:
        yield process


# (perf_analyzer's load options, sonic perf's, the levels both must report, the first column's name)
LOADS = {
    "concurrency": (["--concurrency-range", "1:2"], ["--concurrency", "1:2"], {"1", "2"}, "Concurrency"),
    "rate": (
        ["--request-rate-range", "100:200:100"],
        ["--request-rate", "100:200:100"],
        {"100", "200"},
        "Request Rate",
    ),
}


@pytest.mark.parametrize(
    ("load", "verbose"),
    [("concurrency", False), ("concurrency", True), ("rate", False)],
    ids=["plain", "verbose", "rate"],
)
def test_same_file_as_perf_analyzer(
    perf_server: ServerProcess, perf_analyzer: PerfAnalyzer, tmp_path: Path, load: str, verbose: bool
) -> None:
    _compare(perf_server, perf_analyzer, tmp_path, load, verbose)


def test_cache_columns_as_perf_analyzer(
    cached_server: ServerProcess, perf_analyzer: PerfAnalyzer, tmp_path: Path
) -> None:
    header = _compare(cached_server, perf_analyzer, tmp_path, "concurrency", False)
    assert header[8:11] == ["Server Cache Hit", "Server Cache Miss", "Client Recv"]


def _compare(
    server: ServerProcess, perf_analyzer: PerfAnalyzer, tmp_path: Path, load: str, verbose: bool
) -> list[str]:
    """Both tools against ``server``; checks both files and returns their common header."""
    their_load, our_load, levels, first_column = LOADS[load]
    verbose_args = ["--verbose-csv"] if verbose else []
    theirs, ours = tmp_path / "perf_analyzer.csv", tmp_path / "sonic.csv"
    command = [
        str(perf_analyzer.binary),
        *("-m", "identity", "-b", "2", "-i", "grpc", "-u", server.grpc_address, *their_load),
        *("--measurement-mode", "count_windows", "--measurement-request-count", "50"),
        *("--stability-percentage", "1000", "-f", str(theirs), *verbose_args),
    ]
    result = subprocess.run(
        command, env=perf_analyzer.env, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    code = main(
        ["perf", "-m", "identity", "-b", "2", "-u", server.grpc_address, *our_load, "-q",
         *QUICK_ARGS, "-f", str(ours), "--csv-format", "perf_analyzer", *verbose_args]
    )  # fmt: skip
    assert code == 0

    their_header, their_rows = _read(theirs)
    our_header, our_rows = _read(ours)
    assert our_header == their_header
    assert our_header[:3] == [first_column, "Inferences/Second", "Client Send"]
    assert ("Avg latency" in our_header) is verbose
    assert "Server Queue" in our_header  # both servers' statistics were read
    _check_rows(their_header, their_rows, levels)
    _check_rows(our_header, our_rows, levels)
    return our_header
