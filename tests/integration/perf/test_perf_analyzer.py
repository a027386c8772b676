"""NVIDIA's perf_analyzer (the C++ client in the tritonclient 2.51.0 wheel) drives ``sonic serve``.

perf_analyzer is stricter than tritonclient's Python clients about the response JSON and calls that
Python clients never make (it unregisters CUDA shared memory when it finishes). The binary and
libb64 come from ``tools/install-perf-analyzer.sh`` (``./dev test`` runs it); libcudart from the
``nvidia-cuda-runtime-cu12`` wheel in the test group.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository

from .conftest import PerfAnalyzer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    repository = write_sample_repository(Path(tempfile.mkdtemp(prefix="sonic-perf-analyzer-")))
    with ServerProcess.start([repository], extra_args=["--http-port", "0"]) as process:
        yield process


@pytest.mark.parametrize(
    ("protocol", "options"),
    [
        ("grpc", []),
        ("grpc", ["--streaming"]),
        ("grpc", ["--shared-memory", "system"]),
        ("grpc", ["--streaming", "--shared-memory", "system"]),
        ("http", []),
        ("http", ["--shared-memory", "system"]),
    ],
    ids=["grpc", "grpc-streaming", "grpc-shm", "grpc-streaming-shm", "http", "http-shm"],
)
def test_perf_analyzer_runs_cleanly(
    served: ServerProcess, perf_analyzer: PerfAnalyzer, protocol: str, options: list[str]
) -> None:
    url = served.grpc_address if protocol == "grpc" else served.http_address
    command = [
        str(perf_analyzer.binary),
        *("-m", "identity", "-b", "2", "-i", protocol, "-u", url, "--concurrency-range", "2"),
        *("--measurement-mode", "count_windows", "--measurement-request-count", "20"),
        # A shared, loaded machine: any spread between windows counts as stable; this checks the protocol.
        *("--stability-percentage", "1000"),
        *options,
    ]
    result = subprocess.run(
        command, env=perf_analyzer.env, capture_output=True, text=True, timeout=240, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "Successful request count" in output, output[-3000:]
    assert "Unable to" not in output, output[-3000:]
    assert "rror" not in output, output[-3000:]
