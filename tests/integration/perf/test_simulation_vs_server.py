"""The discrete-event simulation against a real server at small N: clients with a known CPU time per
event (a think time) and the fixed-cost model. The simulation gets the service and wire times the
server and client measured at each level; the test checks the time per event it predicts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sonic.launch import ServerProcess
from sonic.perf.engine import LoadLevel, PerfConfig, run_perf
from sonic.perf.simulate import SimulationConfig, simulate

from .conftest import QUICK

pytestmark = pytest.mark.integration

# Long beside this shared machine's scheduling delays (an overloaded event loop wakes late by
# tens of ms), so the comparison is about the model, not about the machine's noise.
CPU_S = 0.1


async def test_simulation_tracks_measured_time_per_event(perf_server: ServerProcess) -> None:
    config = PerfConfig(
        url=perf_server.grpc_address,
        model="fixed_cost",
        levels=(LoadLevel(concurrency=1, think_time_s=CPU_S), LoadLevel(concurrency=8, think_time_s=CPU_S)),
        measurement=replace(QUICK, window_s=1.0),
    )
    report = await run_perf(config)
    for result in report.results:
        server = result.server
        assert server is not None
        clients = result.level.concurrency
        measured_s = clients / result.requests_per_s  # each client: one request per event
        assert measured_s >= CPU_S  # an event is at least its CPU time
        execution_s = (server.compute_input_us + server.compute_infer_us + server.compute_output_us) / 1e6
        simulated = simulate(
            SimulationConfig(
                clients=clients,
                servers=1,
                cpu_s=CPU_S,
                exec_fixed_s=execution_s,
                exec_per_request_s=server.overhead_us / 1e6,
                latency_s=result.client_wire_us / 1e6,
                events_per_client=20,
            )
        )
        # generous: the machine is shared, and the emulated CPU time is an event-loop timer
        assert 0.5 <= simulated.time_per_event_s / measured_s <= 1.5, (clients, simulated, measured_s)
