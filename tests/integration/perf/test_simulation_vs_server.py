"""The discrete-event simulation against a real server at small N: clients with a known CPU time per
event and the fixed-cost model; the simulation only gets the service time measured at N = 1."""

from __future__ import annotations

import pytest

from sonic.launch import ServerProcess
from sonic.perf.engine import LoadLevel, PerfConfig, run_perf
from sonic.perf.simulate import SimulationConfig, simulate

from .conftest import QUICK

pytestmark = pytest.mark.integration

CPU_S = 0.05


async def test_simulation_tracks_measured_time_per_event(perf_server: ServerProcess) -> None:
    config = PerfConfig(
        url=perf_server.grpc_address,
        model="fixed_cost",
        levels=(LoadLevel(concurrency=1, think_time_s=CPU_S), LoadLevel(concurrency=4, think_time_s=CPU_S)),
        measurement=QUICK,
    )
    report = await run_perf(config)
    light = report.results[0]
    assert light.server is not None
    execution_s = (
        light.server.compute_infer_us + light.server.compute_input_us + light.server.compute_output_us
    ) / 1e6
    for result in report.results:
        clients = result.level.concurrency
        measured_s = clients / result.requests_per_s  # each client: one request per event
        assert measured_s >= CPU_S  # an event is at least its CPU time
        simulated = simulate(
            SimulationConfig(
                clients=clients,
                servers=1,
                cpu_s=CPU_S,
                exec_fixed_s=execution_s,
                exec_per_request_s=light.server.overhead_us / 1e6,
                latency_s=light.client_wire_us / 1e6,
                events_per_client=20,
            )
        )
        # generous: the machine is shared, and the emulated CPU time is an event-loop timer
        assert 0.5 <= simulated.time_per_event_s / measured_s <= 1.5, (clients, simulated, measured_s)
