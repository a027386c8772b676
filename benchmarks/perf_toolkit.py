"""Perf toolkit figures (issue 5): `sonic perf` sweeps, and the scaling model fitted to measurements.

(a) `sonic perf` concurrency sweep on identity [-1, 16] batch 1 and on ProtoDUNE EmTrkMichelId
    batch 235, through the same engine as the CLI; JSON as `sonic perf --json` writes it.
(b) A SONIC workflow emulated on this machine: N clients, each spending ``cpu_s`` per event
    (a think time, so the clients do not compete with the server for the 2 cores) and sending one
    request to the fixed-cost model (no batching). Time per event = N / events per second. The
    scaling model is fitted to it; the discrete-event simulation, fed with the server's own
    per-execution time, is checked against the same points and then run at 2,500 clients on 100
    servers and at the ProtoDUNE figures.

    .venv/bin/python benchmarks/perf_toolkit.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.harness.report import RESULTS, machine, save
from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.models.zoo.emtrk import EMTRK_MICHEL
from sonic.perf.engine import LoadLevel, MeasurementConfig, PerfConfig, run_perf
from sonic.perf.report import summary_line, to_json
from sonic.perf.scaling import fit, protodune_derivation, protodune_params
from sonic.perf.simulate import SimulationConfig, SimulationResult, simulate
from sonic.perf.synthetic import write_fixed_cost_repository

REPOSITORY = RESULTS / "raw" / "server_core_repository"
THREADS = 2


def perf_sweep(
    address: str, model: str, batch: int, concurrencies: list[int], window_s: float
) -> dict[str, Any]:
    config = PerfConfig(
        url=address,
        model=model,
        levels=tuple(LoadLevel(concurrency=c) for c in concurrencies),
        batch_size=batch,
        measurement=MeasurementConfig(window_s=window_s, stable_windows=3, max_windows=6),
    )
    report = asyncio.run(run_perf(config))
    for result in report.results:
        print(f"{model} b{batch} {summary_line(result, config.shared_memory.kind)}", flush=True)
    return to_json(report)


def workflow_points(address: str, cpu_s: float, clients: list[int], window_s: float) -> list[dict[str, Any]]:
    config = PerfConfig(
        url=address,
        model="fixed_cost",
        levels=tuple(LoadLevel(concurrency=n, think_time_s=cpu_s) for n in clients),
        measurement=MeasurementConfig(window_s=window_s, stable_windows=3, max_windows=5),
    )
    report = asyncio.run(run_perf(config))
    points = []
    for result in report.results:
        n = result.level.concurrency
        server = result.server
        assert server is not None
        execution_us = server.compute_input_us + server.compute_infer_us + server.compute_output_us
        point = {
            "clients": n,
            "time_per_event_s": n / result.requests_per_s,
            "events_per_s": result.requests_per_s,
            "latency_mean_ms": result.latency.mean_us / 1000,
            "server_execution_ms": execution_us / 1000,
            "server_overhead_ms": server.overhead_us / 1000,
            "client_wire_ms": result.client_wire_us / 1000,
            "stable": result.stable,
        }
        print(
            f"workflow N={n}: {point['time_per_event_s'] * 1000:.1f} ms/event, {result.requests_per_s:.1f} events/s, "
            f"server execution {point['server_execution_ms']:.2f} ms",
            flush=True,
        )
        points.append(point)
    return points


def perf_sweeps(server_args: list[str], window_s: float) -> None:
    build_model(EMTRK_MICHEL, REPOSITORY)
    identity = REPOSITORY / "identity"
    if not (identity / "1" / "model.onnx").exists():
        identity_model(identity / "1" / "model.onnx")
    (identity / "config.pbtxt").write_text(IDENTITY_CONFIG.lstrip())
    with ServerProcess.start([REPOSITORY], extra_args=server_args) as server:
        identity_report = perf_sweep(server.grpc_address, "identity", 1, [1, 2, 4, 8, 16, 32, 64], window_s)
        emtrk_report = perf_sweep(server.grpc_address, "emtrk_michel", 235, [1, 2, 4, 8], window_s * 2)
    save("perf_identity", {"machine": machine(), "report": identity_report})
    save("perf_emtrk_b235", {"machine": machine(), "report": emtrk_report})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="short windows (a smoke run, not for the record)"
    )
    parser.add_argument("--scaling-only", action="store_true", help="skip the perf sweeps (part a)")
    parser.add_argument("--plots-only", action="store_true", help="redraw the PNGs from the saved JSON")
    parser.add_argument("--sweeps-only", action="store_true", help="only the perf sweeps (part a)")
    args = parser.parse_args()
    if args.plots_only:
        plot_figures(RESULTS / "perf_scaling.json")
        return
    window_s = 1.0 if args.quick else 2.0
    server_args = ["--backend-config", f"onnxruntime,intra_op_thread_count={THREADS}"]

    if not args.scaling_only:
        perf_sweeps(server_args, window_s)
    if args.sweeps_only:
        return

    # Execution ~20 ms on one thread, CPU 200 ms per event: the knee near 10 clients, and per-request
    # overheads of the Python server and of the load generator small beside the execution.
    cpu_s = 0.2
    clients = [1, 2, 4, 8, 12, 16, 24, 32]
    single_thread = ["--backend-config", "onnxruntime,intra_op_thread_count=1"]
    with tempfile.TemporaryDirectory() as tmp:
        root = write_fixed_cost_repository(Path(tmp), depth=40)
        with ServerProcess.start([root], extra_args=single_thread) as server:
            points = workflow_points(server.grpc_address, cpu_s, clients, window_s)
    ratios = [float(p["clients"]) for p in points]
    times = [p["time_per_event_s"] for p in points]
    fitted = fit(ratios, times)
    light = points[0]
    latency_s = (light["client_wire_ms"] + light["server_overhead_ms"]) / 1000
    params = fitted.params(latency_s=latency_s)
    print(
        f"fit: t_ideal {fitted.ideal_s * 1000:.1f} ms, t_GPU {fitted.gpu_s * 1000:.2f} ms, knee "
        f"{fitted.saturation_ratio:.1f} clients per server (rms {fitted.rms_residual_s * 1000:.2f} ms)"
    )

    def simulated(
        clients: int, service: dict[str, Any], *, servers: int = 1, events: int = 30
    ) -> SimulationResult:
        """The emulated workflow simulated (its CPU per event, its wire latency at light load) with the
        service time of ``service``, a measured point: the execution, and the request handling outside
        it, serial on the loop."""
        config = SimulationConfig(
            clients=clients, servers=servers, cpu_s=cpu_s, exec_fixed_s=service["server_execution_ms"] / 1000,
            exec_per_request_s=service["server_overhead_ms"] / 1000, latency_s=light["client_wire_ms"] / 1000,
            events_per_client=events,
        )  # fmt: skip
        return simulate(config)

    comparison = []
    for point in points:
        n = point["clients"]
        # (1) service time measured at N=1 only: a prediction; (2) the level's own service time, which
        # on this shared machine varies with the other tenants' load: the queueing model alone.
        from_light = simulated(n, light).time_per_event_s
        from_level = simulated(n, point).time_per_event_s
        comparison.append(
            {
                "clients": n,
                "measured_s": point["time_per_event_s"],
                "simulated_from_n1_s": from_light,
                "simulated_from_level_s": from_level,
                "model_s": fitted.predict([n])[0],
            }
        )
        print(
            f"  N={n}: measured {point['time_per_event_s'] * 1000:.1f} ms, simulated "
            f"{from_light * 1000:.1f} ms (N=1 service time) {from_level * 1000:.1f} ms (own service time), "
            f"fitted model {comparison[-1]['model_s'] * 1000:.1f} ms"
        )
    at_scale = simulated(2500, light, servers=100, events=20)
    print(
        f"2,500 clients on 100 servers: {at_scale.time_per_event_s * 1000:.1f} ms/event, "
        f"{at_scale.events_per_s:.0f} events/s, utilization {at_scale.server_utilization:.2f}"
    )
    d = protodune_derivation()
    proto = protodune_params(gpu_s=d["gpu_s_implied_by_knee"])
    proto_sim = []
    for n in (100, 200, 270, 300, 400):
        config = SimulationConfig(
            clients=n, servers=4, cpu_s=proto.cpu_serial_s, exec_fixed_s=proto.gpu_s, exec_per_request_s=0.0,
            latency_s=proto.latency_s, events_per_client=8, cpu_jitter=0.05,
        )  # fmt: skip
        simulated_s = simulate(config).time_per_event_s
        proto_sim.append(
            {"processes": n, "model_s": proto.time_per_event_s(n, 4), "simulated_s": simulated_s}
        )
    path = save(
        "perf_scaling",
        {
            "machine": machine(),
            "workflow": {"cpu_s": cpu_s, "model": "fixed_cost", "points": points},
            "fit": asdict(fitted) | {"saturation_ratio": fitted.saturation_ratio},
            "params": asdict(params),
            "simulation_vs_measured": comparison,
            "simulation_2500_clients_100_servers": {
                "time_per_event_s": at_scale.time_per_event_s,
                "events_per_s": at_scale.events_per_s,
                "server_utilization": at_scale.server_utilization,
                "clients_per_server": 25,
            },
            "protodune": d,
            "protodune_4_gpus": proto_sim,
        },
    )
    print(f"saved {path}")
    plot_figures(path)


def plot_figures(path: Path) -> None:
    """Measured against predicted (emulated workflow) and the ProtoDUNE curves, as PNGs beside the JSON."""
    from sonic.perf.plot import plot_scaling  # noqa: PLC0415  (matplotlib: the perf extra)

    data = json.loads(path.read_text())
    rows = data["simulation_vs_measured"]
    clients = [r["clients"] for r in rows]
    grid = [max(clients) * i / 100 for i in range(1, 101)]
    fitted = data["fit"]
    plot_scaling(
        clients,
        [r["measured_s"] for r in rows],
        {
            "fitted model": (grid, [max(fitted["ideal_s"], fitted["gpu_s"] * x) for x in grid]),
            "simulation (N=1 service time)": (clients, [r["simulated_from_n1_s"] for r in rows]),
        },
        RESULTS / "perf_scaling_workflow.png",
        title="emulated workflow: 200 ms CPU per event, fixed-cost model",
    )
    proto = data["protodune_4_gpus"]
    plot_scaling(
        [],
        [],
        {
            "model": ([p["processes"] / 4 for p in proto], [p["model_s"] for p in proto]),
            "simulation": ([p["processes"] / 4 for p in proto], [p["simulated_s"] for p in proto]),
        },
        RESULTS / "perf_scaling_protodune.png",
        title="ProtoDUNE on 4 GPUs, t_GPU = 1.79 s",
    )


if __name__ == "__main__":
    main()
