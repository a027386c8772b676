"""``sonic perf --replay``: a trace written by the recorder is sent again on its schedule, to a server that
records it in turn; the two traces agree in order, shapes, contents and timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tests.integration.traffic.trace import ARRIVALS_MS, write_trace

from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository
from sonic.traffic.schema import read_traffic

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("time_scale", [1.0, 2.0])
def test_a_replayed_trace_is_recorded_again_as_it_was(tmp_path: Path, time_scale: float) -> None:
    trace, again = tmp_path / "trace", tmp_path / "again"
    write_trace(trace, ARRIVALS_MS, model="identity", dims=16)
    repository = write_test_repository(
        tmp_path / "models", "sonic", tuple(m for m in MODELS if m.name == "identity")
    )
    args = ["--traffic-log", str(again), "--traffic-log-sample-contents-every", "1"]
    with ServerProcess.start([repository], extra_args=args) as server:
        report_path = tmp_path / "replay.json"
        command = [
            sys.executable,
            "-m",
            "sonic.cli.main",
            "perf",
            "-u",
            server.grpc_address,
            "--replay",
            str(trace),
        ]
        command += ["--time-scale", str(time_scale), "--json", str(report_path)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert server.stop() == 0
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["requests"] == len(ARRIVALS_MS)
    assert report["models"]["identity"]["failed"] == 0
    assert report["recorded_per_s"] == [len(ARRIVALS_MS)]
    replayed = read_traffic(again).to_pylist()
    original = read_traffic(trace).to_pylist()
    assert [r["input_shapes"] for r in replayed] == [r["input_shapes"] for r in original]
    for before, after in zip(original, replayed, strict=True):
        if before["contents"] is not None:  # recorded bytes are sent as they were
            assert after["contents"] == before["contents"]
    # Timing: arrivals at the server follow the trace, scaled (generous bounds: a loaded 2-core machine).
    offsets = np.array([r["arrival_unix_ns"] for r in replayed], dtype=np.float64)
    offsets = (offsets - offsets[0]) / 1e6
    expected = np.array(ARRIVALS_MS, dtype=np.float64) / time_scale
    assert float(np.median(np.abs(offsets - expected))) < 30.0
    assert abs(offsets[-1] - expected[-1]) < 150.0


def test_replay_of_an_empty_directory_says_so(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "sonic.cli.main", "perf", "-u", "127.0.0.1:1", "--replay", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert f"no traffic recorded under {tmp_path}" in done.stderr
