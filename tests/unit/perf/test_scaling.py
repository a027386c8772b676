"""The scaling model: formula, fit on synthetic data, ProtoDUNE's 68:1, and the simulation's limits."""

from __future__ import annotations

import numpy as np
import pytest

from sonic.perf.scaling import ScalingParams, fit, protodune_derivation, protodune_params
from sonic.perf.simulate import SimulationConfig, simulate

pytestmark = pytest.mark.unit


def test_formula_is_flat_then_linear() -> None:
    params = ScalingParams(cpu_serial_s=8.0, gpu_s=1.0, latency_s=1.0)
    assert params.ideal_s == 10.0
    assert params.saturation_ratio == 10.0
    assert params.time_per_event_s(5) == params.time_per_event_s(10) == 10.0
    assert params.time_per_event_s(20) == pytest.approx(20.0)  # t_GPU · N: the server is the bottleneck
    assert params.time_per_event_s(40, 2) == pytest.approx(20.0)  # only the ratio matters
    assert params.events_per_s(20) == pytest.approx(1.0)  # saturated: one event per t_GPU


def test_fit_recovers_known_parameters_from_noisy_data() -> None:
    truth = ScalingParams(cpu_serial_s=40.0, gpu_s=0.5, latency_s=2.0)  # knee at 85
    rng = np.random.default_rng(3)
    ratios = np.arange(10, 200, 10, dtype=float)
    times = np.array([truth.time_per_event_s(r) for r in ratios]) * (
        1 + 0.01 * rng.standard_normal(len(ratios))
    )
    result = fit(ratios.tolist(), times.tolist())
    assert result.ideal_s == pytest.approx(truth.ideal_s, rel=0.02)
    assert result.gpu_s == pytest.approx(truth.gpu_s, rel=0.02)
    assert result.saturation_ratio == pytest.approx(truth.saturation_ratio, rel=0.04)
    split = result.params(latency_s=2.0)
    assert split.cpu_serial_s == pytest.approx(40.0, rel=0.05)


def test_fit_needs_both_sides_of_the_knee() -> None:
    flat = ScalingParams(10.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="bracket"):
        fit([1, 2, 3, 4], [flat.time_per_event_s(r) for r in (1, 2, 3, 4)])
    with pytest.raises(ValueError, match="at least 3"):
        fit([1, 2], [1, 2])


def test_protodune_figures_give_the_68_to_1_ratio() -> None:
    d = protodune_derivation()
    assert d["ideal_s"] == pytest.approx(122.0)  # 110 + 7 + 1.9 + 0.4 + 2.7
    assert d["speedup"] == pytest.approx(2.7, abs=0.01)  # the seed's "2.7x speed up of full workflow"
    assert d["ratio_with_listed_gpu_s"] == pytest.approx(45.2, abs=0.1)  # 122 / 2.7: not 68
    assert round(d["measured_knee_ratio_big_batch"]) == 68  # 270 processes / 4 GPUs
    assert round(d["ratio_with_implied_gpu_s"]) == 68
    assert d["gpu_s_implied_by_knee"] == pytest.approx(1.79, abs=0.01)
    # the listed 2.7 s reproduces the small-batch knee: 184 predicted against 190 measured
    assert d["small_batch_knee_processes_predicted"] == pytest.approx(190, rel=0.05)


def test_simulation_matches_the_model_asymptotes() -> None:
    params = protodune_params(gpu_s=1.79)
    for clients in (100, 400):  # well below and well above the knee (4 GPUs x 68 = 270)
        result = simulate(
            SimulationConfig(
                clients=clients,
                servers=4,
                cpu_s=params.cpu_serial_s,
                exec_fixed_s=params.gpu_s,
                exec_per_request_s=0.0,
                latency_s=params.latency_s,
                events_per_client=8,
            )
        )
        assert result.time_per_event_s == pytest.approx(params.time_per_event_s(clients, 4), rel=0.03)
    assert result.server_utilization > 0.95  # saturated at 400


def test_simulation_dynamic_batching_relieves_a_per_execution_cost() -> None:
    common = {"clients": 40, "servers": 1, "cpu_s": 0.01, "exec_fixed_s": 0.005, "exec_per_request_s": 0.0001}
    unbatched = simulate(SimulationConfig(**common, max_batch_requests=1))  # type: ignore[arg-type]
    batched = simulate(SimulationConfig(**common, max_batch_requests=16))  # type: ignore[arg-type]
    assert unbatched.mean_batch_requests == 1.0
    assert batched.mean_batch_requests > 4
    assert batched.time_per_event_s < unbatched.time_per_event_s / 2


def test_simulation_at_the_cms_scale_runs_quickly() -> None:
    """2,500 jobs on 100 servers (seed 001's scale-out test) is the same ratio as 25 on 1."""
    small = simulate(
        SimulationConfig(clients=25, servers=1, cpu_s=0.9, exec_fixed_s=0.02, exec_per_request_s=0.0)
    )
    large = simulate(
        SimulationConfig(clients=2500, servers=100, cpu_s=0.9, exec_fixed_s=0.02, exec_per_request_s=0.0)
    )
    assert large.time_per_event_s == pytest.approx(small.time_per_event_s, rel=0.05)
    assert large.events_per_s == pytest.approx(100 * small.events_per_s, rel=0.1)
