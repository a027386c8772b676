"""``sonic analyze --traffic``: on a bursty trace, a model that costs 20 ms per execution served without
dynamic batching (the deliberately bad configuration) misses a 100 ms p99; the recommendation batches,
meets it in every paired round, and ``--write`` puts it in the repository. A candidate that is the
current configuration once completed is not replayed, and where nothing beats the current configuration
beyond the noise, nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.traffic.trace import write_trace

from sonic.protocol.model_config import load_config_file

pytestmark = pytest.mark.integration

PYTHON_MODELS = Path(__file__).parents[1] / "backends" / "python_models"
BAD_CONFIG = """name: "launch_bound"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
# Four bursts of eight single-event requests, 300 ms apart.
BURSTS_MS = [burst * 300 + i for burst in range(4) for i in range(8)]


def test_the_recommendation_beats_the_bad_configuration_and_is_written(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    (repository / "launch_bound" / "1").mkdir(parents=True)
    (repository / "launch_bound" / "config.pbtxt").write_text(BAD_CONFIG, encoding="utf-8")
    (repository / "launch_bound" / "1" / "model.py").write_bytes(
        (PYTHON_MODELS / "launch_bound.py").read_bytes()
    )
    trace = tmp_path / "trace"
    write_trace(trace, BURSTS_MS, model="launch_bound", dims=4, batches=(1,), compute_us=20_000)
    output = tmp_path / "out"
    command = [sys.executable, "-m", "sonic.cli.main", "analyze", "--model-repository", str(repository)]
    command += [
        "-m",
        "launch_bound",
        "--traffic",
        str(trace),
        "--slo-p99-ms",
        "100",
        "--instance-counts",
        "1",
    ]
    command += ["--max-batch-sizes", "8", "--dynamic-batching", "on", "--max-queue-delays-us", "0"]
    command += ["--jobs-recorded", "8", "--jobs", "100", "-o", str(output), "--write"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((output / "traffic-analysis.json").read_text(encoding="utf-8"))
    current, recommended = report["current"], report["recommended"]
    assert current["failed"] == 0
    assert current["p99_ms"] > 100  # eight 20 ms executions in a row behind a burst
    assert recommended["name"] != "current"
    assert "dynamic_batching=on" in recommended["name"]
    assert recommended["p99_ms"] <= 100
    assert report["p99_gain_over_current"] > 1.5
    # Three paired rounds (the default), the batching candidate better than the current in every one.
    assert report["repeats"] == 3
    assert not report["keep_current"]
    assert len(current["rounds"]) == len(recommended["rounds"]) == 3
    (verdict,) = report["verdicts"]
    assert verdict["beats_current"]
    assert max(verdict["p99_ratios_per_round"]) < 1
    # The trace's own load: 32 requests x 20 ms over about a second; 8 jobs sent it.
    scaling = report["scaling"]
    assert scaling["requests"] == len(BURSTS_MS)
    # 32 x 20 ms of server time over ~0.92 s: utilisation ~0.7, 8 jobs -> ~11 per server, 100 jobs -> ~9.
    assert 0.5 < scaling["utilisation"] < 0.8
    assert 9 < scaling["jobs_per_server"] < 16
    assert 7 <= scaling["servers_for_jobs"]["servers"] <= 12
    written = load_config_file(repository / "launch_bound" / "config.pbtxt")
    assert written.HasField("dynamic_batching")
    assert (repository / "launch_bound" / "config.pbtxt.orig").read_text(encoding="utf-8") == BAD_CONFIG


def test_nothing_better_keeps_the_current_configuration_and_writes_nothing(tmp_path: Path) -> None:
    good = BAD_CONFIG.replace("instance_group", "dynamic_batching { }\ninstance_group")
    repository = tmp_path / "models"
    (repository / "launch_bound" / "1").mkdir(parents=True)
    (repository / "launch_bound" / "config.pbtxt").write_text(good, encoding="utf-8")
    (repository / "launch_bound" / "1" / "model.py").write_bytes(
        (PYTHON_MODELS / "launch_bound.py").read_bytes()
    )
    trace = tmp_path / "trace"
    write_trace(trace, BURSTS_MS, model="launch_bound", dims=4, batches=(1,), compute_us=20_000)
    output = tmp_path / "out"
    command = [sys.executable, "-m", "sonic.cli.main", "analyze", "--model-repository", str(repository)]
    command += ["-m", "launch_bound", "--traffic", str(trace), "--slo-p99-ms", "100", "--repeats", "2"]
    # Dynamic batching with no delay is the current configuration once completed (preferred: 8, the
    # default); without dynamic batching, eight 20 ms executions queue behind each burst.
    command += ["--instance-counts", "1", "--max-batch-sizes", "8", "--dynamic-batching", "off,on"]
    command += ["--max-queue-delays-us", "0", "-o", str(output), "--write"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "keep the current configuration" in done.stdout
    report = json.loads((output / "traffic-analysis.json").read_text(encoding="utf-8"))
    assert report["keep_current"]
    assert report["recommended"] is None
    assert report["repeats"] == 2
    unbatched, same = report["candidates"]  # off first, as --dynamic-batching lists them
    assert "dynamic_batching=on" in same["name"]
    assert same["rounds"] == []
    assert same["error"] == "skipped: the current configuration, completed"
    (verdict,) = report["verdicts"]
    assert verdict["name"] == unbatched["name"]
    assert not verdict["beats_current"]
    assert verdict["median_ratio"] > 1
    assert (repository / "launch_bound" / "config.pbtxt").read_text(encoding="utf-8") == good
    assert not (repository / "launch_bound" / "config.pbtxt.orig").exists()
