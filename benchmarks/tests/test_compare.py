"""The pure parts of benchmarks/compare/: configs for the other servers, paired ratios, the docs table.

Here, next to the benchmarks, because it tests their harness, which is not part of the installed package.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnxruntime as ort
import pytest
from benchmarks.compare import repositories
from benchmarks.compare import summary as compare_summary
from benchmarks.compare.measure import measure, memcpy_floor_ms, requests_per_s
from benchmarks.compare.workloads import WORKLOADS, Workload
from benchmarks.harness.load import LoadResult
from benchmarks.harness.report import replace_between

from sonic.models.zoo import registry
from sonic.testing.repository import MODELS, write_test_repository

pytestmark = pytest.mark.unit


def test_triton_config_switches_backend_and_pins_one_cpu_instance() -> None:
    text = repositories.triton_config(registry()["deepcalo"].config_text)
    assert 'backend: "python"' in text
    assert "onnxruntime" not in text
    assert "instance_group [ { kind: KIND_CPU count: 1 } ]" in text
    assert "max_queue_delay_microseconds: 200" in text  # batching settings kept as they are


def test_sonic_and_triton_run_the_same_instance_count() -> None:
    for model in ("facile", "deepcalo", "emtrk_michel", "resnet_top"):
        text = registry()[model].config_text
        assert "instance_group" not in text  # else sonic and Triton would both follow it
        assert repositories.one_cpu_instance(text).endswith(
            "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
        )
    pinned = 'name: "m"\ninstance_group [ { kind: KIND_CPU count: 3 } ]\n'
    assert repositories.one_cpu_instance(pinned) == pinned


def test_mlserver_settings_use_the_config_delay_with_a_floor() -> None:
    deepcalo = repositories.mlserver_settings(
        "deepcalo", Path("/m.onnx"), registry()["deepcalo"].config_text, 32
    )
    assert deepcalo["max_batch_time"] == pytest.approx(200e-6)
    assert deepcalo["max_batch_size"] == 32
    assert deepcalo["parameters"] == {"uri": "/m.onnx", "extra": {"threads": 2, "spinning": 0}}
    no_delay = repositories.mlserver_settings("identity", Path("/i.onnx"), "dynamic_batching { }", 32)
    assert no_delay["max_batch_time"] == pytest.approx(100e-6)


def _rows() -> list[dict[str, Any]]:
    figures = {"sonic": (300.0, 100.0), "triton": (200.0, 200.0), "mlserver": (50.0, 25.0)}
    rows = []
    for server, per_round in figures.items():
        for index, value in enumerate(per_round):
            rows.append(
                {"round": index, "workload": "identity_b1", "server": server, "requests_per_s": value}
            )
    return rows


def test_ratios_are_paired_within_a_round() -> None:
    summary = compare_summary.summarize({"rows": _rows()})["identity_b1"]
    assert summary["metric"] == "requests_per_s"
    assert summary["servers"]["sonic"]["median"] == pytest.approx(200.0)
    # Rounds give 1.5 and 0.5: the median of paired ratios, not the ratio of medians (1.0).
    ratio = summary["ratios"]["sonic/triton"]
    assert (ratio["median"], ratio["min"], ratio["max"]) == pytest.approx((1.0, 0.5, 1.5))
    assert summary["ratios"]["sonic/mlserver"]["median"] == pytest.approx(5.0)
    targets = {t["reference"]: t["met"] for t in summary["targets"]}
    assert targets == {"triton": False, "mlserver": True}  # issue 37: at least 1.2x Triton


def test_table_says_by_how_much_a_target_is_missed(tmp_path: Path) -> None:
    rows = [
        {**r, "requests_per_s": r["requests_per_s"] / 4} if r["server"] == "sonic" else r for r in _rows()
    ]
    lines = compare_summary.table(compare_summary.summarize({"rows": rows}))
    assert "triton: 0.25x [0.12-0.38] vs ≥ 1.2x — missed by 79%" in lines[-1]
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        f"# B\n\n## Comparisons\n\n{compare_summary.TABLE_START}\nold\n{compare_summary.TABLE_END}\n\nprose\n"
    )
    assert replace_between(docs, compare_summary.TABLE_START, compare_summary.TABLE_END, lines)
    text = docs.read_text()
    assert "old" not in text
    assert "missed by 79%" in text
    assert text.endswith(f"{compare_summary.TABLE_END}\n\nprose\n")
    bare = tmp_path / "bare.md"
    bare.write_text("# B\n")
    assert not replace_between(bare, compare_summary.TABLE_START, compare_summary.TABLE_END, lines)
    assert bare.read_text() == "# B\n"


def test_triton_model_is_the_template_with_its_settings_beside_it(tmp_path: Path) -> None:
    sonic_repo = write_test_repository(
        tmp_path / "sonic", "sonic", tuple(m for m in MODELS if m.name == "identity")
    )
    repositories.write_triton_model(tmp_path / "triton", "identity", sonic_repo)
    model = tmp_path / "triton" / "identity" / "1"
    assert (model / "model.py").read_text() == (repositories.TEMPLATES / "triton_onnx_model.py").read_text()
    settings = json.loads((model / "compare_settings.json").read_text())
    assert settings["onnx"] == str(sonic_repo / "identity" / "1" / "model.onnx")
    assert settings["threads"] == 2
    assert 'backend: "python"' in (tmp_path / "triton" / "identity" / "config.pbtxt").read_text()


def test_cpu_table_pairs_server_cpu_per_request_and_weighs_transfers_against_the_floor() -> None:
    rows = [
        {**r, "requests": 1000, "server_cpu_s": {"sonic": 0.06, "triton": 0.1}.get(r["server"], 1.0)}
        for r in _rows()
    ]
    transfer = [
        {
            "round": index,
            "workload": "large_15mb",
            "server": server,
            "MB_per_s": 100.0,
            "requests": 10,
            "server_cpu_s": cpu,
        }
        for index in (0, 1)
        for server, cpu in (("sonic", 0.05), ("triton", 0.1))
    ]
    summary = compare_summary.summarize({"rows": rows + transfer})
    assert summary["identity_b1"]["server_cpu_us_per_request"]["sonic"]["median"] == pytest.approx(60.0)
    assert summary["identity_b1"]["server_cpu_ratios"]["sonic/triton"]["median"] == pytest.approx(0.6)
    lines = compare_summary.cpu_table(summary, {"large_15mb": 2.0})
    identity = next(line for line in lines if line.startswith("| identity b1 c32 |"))
    assert "| 60 | 100 | 1,000 | 0.60 [0.60-0.60] | ≤ 0.7x triton: met |" in identity
    large = next(line for line in lines if line.startswith("| 15.6 MB"))
    assert "2.5x the memcpy floor (2.0 ms) vs ≤ 2.0x: missed" in large  # 5 ms per request against 2 ms


class _BusySession:
    """Stands for an onnxruntime session in the direct ceiling: each run spends ``cpu_s`` of this thread."""

    def __init__(self, cpu_s: float) -> None:
        self.cpu_s = cpu_s

    def run(self, names: object, feeds: object) -> None:  # noqa: ARG002  (InferenceSession.run's signature)
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass


def test_server_cpu_is_the_measured_windows_alone() -> None:
    """The warm-up window (1 s here) stays out of the CPU count: only the measured window's requests are
    counted, so its CPU alone is divided by them (the warm-up's inflated every figure by 1.33x)."""
    workload = Workload("busy", "busy", "busy", 1, 1, "rate", ("direct",))
    session = cast("ort.InferenceSession", _BusySession(0.002))
    result = measure(workload, "direct", {}, {}, {"busy": session}, 0.2, None)
    assert result["requests"] >= 10
    cpu_per_request = result["server_cpu_s"] / result["requests"]
    assert 0.0015 < cpu_per_request < 0.004  # ~2 ms; with the 1 s warm-up counted, ~12 ms


def test_shared_memory_rows_carry_issue_37_targets_and_the_memcpy_floor() -> None:
    """The system-shm rows: the same targets as their TCP twins, the floor line for the transfer, and
    only servers that have shared memory (MLServer has none)."""
    shm = {w.key: w for w in WORKLOADS if w.load.startswith("shm")}
    assert set(shm) == {"facile_b16000_shm", "facile_b16000_shm_native", "large_15mb_shm"}
    assert all("mlserver" not in w.servers and "sonic-grpcio" not in w.servers for w in shm.values())
    assert compare_summary.TARGETS["facile_b16000_shm"] == compare_summary.TARGETS["facile_b16000"]
    assert compare_summary.TARGETS["facile_b16000_shm_native"] == compare_summary.TARGETS["facile_b16000"]
    assert compare_summary.TARGETS["large_15mb_shm"] == compare_summary.TARGETS["large_15mb"]
    floors = memcpy_floor_ms({"large_15mb_shm": {"INPUT0": np.ones(1 << 20, np.float32)}})
    assert set(floors) == {"large_15mb_shm"}


def test_slow_compute_rates_come_from_latency_not_whole_request_counts() -> None:
    """EmTrkMichelId completes 18 or 19 requests per window, a step of ~5 %: its rate is concurrency over
    mean latency (Little's law); transfers and fast workloads keep the count."""
    result = LoadResult(2, 18, 6.0, 3.0, 5079.0, 600.0, 700.0, 800.0, mean_ms=631.0)
    workloads = {w.key: w for w in WORKLOADS}
    assert requests_per_s(workloads["emtrk_b1693"], result) == pytest.approx(2 / 0.631)
    assert requests_per_s(workloads["large_15mb"], result) == 3.0
    assert requests_per_s(workloads["facile_b16000"], result) == 3.0
