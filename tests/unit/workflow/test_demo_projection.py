"""GPU-server projections of the demo: the scaling model with the seeds' GPU figures, labelled as such."""

from __future__ import annotations

import pytest

from sonic.demos import projection
from sonic.perf import scaling


def test_protodune_divides_the_server_time_by_the_seeds_cpu_to_t4_ratio() -> None:
    run = {"non_ml_s": 1.0, "preprocessing_s": 0.1, "transfer_s": 0.2, "travel_s": 0.05,
           "server_compute_s": 0.81, "time_per_event_s": 2.0}  # fmt: skip
    gpu = projection.protodune(run)
    assert gpu["kind"] == "projection"
    assert gpu["gpu_s"] == pytest.approx(0.81 * scaling.PROTODUNE_GPU_S / scaling.PROTODUNE_ML_CPU_S)
    measured_path, gpu_path = 1.1 + 0.25 + 0.81, 1.1 + 0.25 + gpu["gpu_s"]
    assert gpu["speedup_vs_cpu_server"] == pytest.approx(measured_path / gpu_path)
    assert gpu["time_per_event_s"] == pytest.approx(2.0 * gpu_path / measured_path)
    assert gpu["clients_per_server"] == pytest.approx(gpu_path / gpu["gpu_s"])
    assert "no GPU run" in gpu["gpu_measurement"]


def test_hlt_puts_the_knee_at_the_seeds_300_clients_per_gpu() -> None:
    gpu = projection.hlt(service_s=0.030, server_compute_s=0.002)
    assert gpu["clients_per_server"] == pytest.approx(projection.HLT_SEED_CLIENTS_PER_GPU)
    assert gpu["time_per_event_s"] < 0.030
    assert "PROJECTION" in projection.describe(gpu)
