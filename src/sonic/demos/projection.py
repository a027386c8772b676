"""What the demo's runs would give with a GPU server: projections from the scaling model, never measurements.

The demo measures, per event, the client's own CPU time, the time moving data and the server's
compute time, with the server computing on this machine's CPU. A GPU changes only the server's
share; :mod:`sonic.perf.scaling` turns that into a time per event and a clients-per-server ratio.
What the GPU's server time is comes from the seeds, and each projection says which figure it used:

- ProtoDUNE (seed 002): EmTrkMichelId takes 220 s per event on a CPU and 2.7 s on a T4 GPU, so the
  measured server time here is divided by that speed-up (about 81x).
- HLT (seed 000): about 300 client jobs per V100 GPU for FACILE; the knee of the scaling model sits
  there when ``t_GPU = (t_CPU + t_latency) / (300 - 1)``, with ``t_CPU + t_latency`` measured here.

No GPU run of the demonstrators exists yet (docs/benchmarks.md); :data:`GPU_MEASUREMENT` says so in
every report until one does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sonic.perf import scaling

PROTODUNE_GPU_SPEEDUP = scaling.PROTODUNE_ML_CPU_S / scaling.PROTODUNE_GPU_S  # 220 s / 2.7 s
HLT_SEED_CLIENTS_PER_GPU = 300.0  # seed 000: ~300 HLT clients per V100 for FACILE
GPU_MEASUREMENT = "no GPU run of the demonstrators yet (docs/benchmarks.md): projection only"


def _projection(
    params: scaling.ScalingParams, measured: scaling.ScalingParams, measured_s: float, basis: str
) -> dict[str, Any]:
    """``measured_s`` (the run's time per event) scaled by how much the GPU shortens one event's path."""
    speedup = measured.ideal_s / params.ideal_s
    return {
        "kind": "projection",
        "basis": basis,
        "measured_cpu_server_s": measured_s,
        "cpu_serial_s": params.cpu_serial_s,
        "latency_s": params.latency_s,
        "gpu_s": params.gpu_s,
        "time_per_event_s": measured_s / speedup,
        "speedup_vs_cpu_server": speedup,
        "clients_per_server": params.saturation_ratio,
        "server_events_per_s": 1.0 / params.gpu_s,
        "gpu_measurement": GPU_MEASUREMENT,
    }


def protodune(run: dict[str, float]) -> dict[str, Any]:
    """One service run's breakdown (``sonic.demos.protodune``'s per-run dict) with a T4-class GPU server."""
    cpu_serial = run["non_ml_s"] + run["preprocessing_s"]
    # Transfer as measured includes waiting behind the other stream's executions on the CPU server,
    # which a faster server shortens: an upper bound, so the projection errs on the slow side.
    latency = run["transfer_s"] + run["travel_s"]
    measured = scaling.ScalingParams(cpu_serial, max(run["server_compute_s"], 1e-9), latency)
    params = replace(measured, gpu_s=measured.gpu_s / PROTODUNE_GPU_SPEEDUP)
    basis = (
        f"measured server time {run['server_compute_s']:.3g} s/event on this CPU / {PROTODUNE_GPU_SPEEDUP:.0f} "
        f"(seed 002: {scaling.PROTODUNE_ML_CPU_S:.0f} s on a CPU, {scaling.PROTODUNE_GPU_S} s on a T4)"
    )
    return _projection(params, measured, run["time_per_event_s"], basis)


def hlt(service_s: float, server_compute_s: float) -> dict[str, Any]:
    """One HLT client's measured time per event and server time, with a V100-class GPU server."""
    client_s = max(service_s - server_compute_s, 0.0)  # the client's CPU work and the data's travel
    gpu_s = max(client_s / (HLT_SEED_CLIENTS_PER_GPU - 1), 1e-9)
    measured = scaling.ScalingParams(cpu_serial_s=client_s, gpu_s=max(server_compute_s, 1e-9), latency_s=0.0)
    params = replace(measured, gpu_s=gpu_s)
    basis = (
        f"t_GPU such that the knee is at seed 000's ~{HLT_SEED_CLIENTS_PER_GPU:.0f} clients per V100: "
        f"(measured {client_s * 1e3:.3g} ms client + travel) / {HLT_SEED_CLIENTS_PER_GPU - 1:.0f}"
    )
    return _projection(params, measured, service_s, basis)


def describe(projection: dict[str, Any]) -> str:
    """One line for the console: clearly a projection, with its basis."""
    return (
        f"GPU server, PROJECTION (scaling model; {projection['basis']}): "
        f"{projection['time_per_event_s']:.4g} s/event against {projection['measured_cpu_server_s']:.4g} "
        f"measured with this CPU as the server, {projection['clients_per_server']:.0f} clients per server; "
        f"{projection['gpu_measurement']}"
    )
