"""Seed 002's processing-time scaling model for SONIC workflows, its fit, and the ProtoDUNE figures.

Per event, a client spends ``(1-p)·t_CPU`` on its own CPU (work that is not offloaded), ``t_GPU``
of server (GPU) time and ``t_latency`` moving data. While the servers keep up,

    t_ideal = (1-p)·t_CPU + t_GPU + t_latency

and they saturate when ``N_CPU/N_GPU > t_ideal/t_GPU``; beyond that clients wait:

    t_SONIC = (1-p)·t_CPU + t_GPU·[1 + max(0, N_CPU/N_GPU - t_ideal/t_GPU)] + t_latency

which is ``max(t_ideal, t_GPU·N_CPU/N_GPU)``: flat, then the server's throughput shared by all
clients. The optimal clients-per-server ratio is the knee, ``t_ideal/t_GPU``: the most clients
one server takes with no one waiting. Timing alone fixes ``t_ideal`` and ``t_GPU`` only; how
``t_ideal - t_GPU`` splits into CPU time and latency needs one of them measured separately.

ProtoDUNE (seed 002, EmTrkMichelId on 4 T4 GPUs in Google Cloud). CPU only: 110 s non-ML +
220 s ML = 330 s per event. With SONIC the ML module takes 12 s = 7 s preprocessing (stays on the
CPU) + 1.9 s bandwidth + 0.4 s travel (big batches; 2.6 s with batches of 235) + 2.7 s GPU, so
``(1-p)·t_CPU = 117 s`` (p = 213/330 = 0.645), ``t_latency = 2.3 s``, ``t_GPU = 2.7 s`` and
``t_ideal = 122 s`` (330/122 = 2.7x faster, as the seed says).

Where 68:1 comes from: the formula with the listed ``t_GPU = 2.7 s`` gives 122/2.7 = 45 clients
per GPU, not 68. The seed's measured knee is "constant up to 190 (270) processes for small (big)
batch size" on its 4 GPUs: 270/4 = 67.5, i.e. 68:1. The model puts its knee there when the GPU
time per event is t_GPU = 119.3/(67.5 - 1) = 1.79 s (t_ideal = 121.1 s; about 31k inferences/s
per T4 for 55k patches, above the seed's own perf_client range of 20k ± 2k, where 2.7 s came
from). The listed 2.7 s instead
reproduces the small-batch knee: with 2.6 s travel, t_ideal = 124.2 s, 124.2/2.7 = 46 per GPU,
184 processes on 4 GPUs against the 190 measured. So 68:1 is the big-batch measurement, and the
model reproduces it with t_GPU = 1.79 s; :func:`protodune_derivation` computes every number here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScalingParams:
    cpu_serial_s: float  # (1-p)·t_CPU: per-event CPU time left on the client
    gpu_s: float  # t_GPU: server (GPU) time per event
    latency_s: float  # t_latency: per-event transfer time (travel + bandwidth)

    def __post_init__(self) -> None:
        if self.gpu_s <= 0 or self.cpu_serial_s < 0 or self.latency_s < 0:
            raise ValueError(f"need gpu_s > 0 and non-negative cpu_serial_s, latency_s; got {self}")

    @property
    def ideal_s(self) -> float:
        return self.cpu_serial_s + self.gpu_s + self.latency_s

    @property
    def saturation_ratio(self) -> float:
        """Clients per server at the knee: the optimal ratio."""
        return self.ideal_s / self.gpu_s

    def time_per_event_s(self, clients: float, servers: float = 1.0) -> float:
        ratio = clients / servers
        return (
            self.cpu_serial_s
            + self.gpu_s * (1 + max(0.0, ratio - self.ideal_s / self.gpu_s))
            + self.latency_s
        )

    def events_per_s(self, clients: float, servers: float = 1.0) -> float:
        """Total throughput of ``clients`` jobs: grows linearly up to the knee, then stays at servers/t_GPU."""
        return clients / self.time_per_event_s(clients, servers)


@dataclass(frozen=True)
class ScalingFit:
    ideal_s: float
    gpu_s: float
    rms_residual_s: float
    points: int

    @property
    def saturation_ratio(self) -> float:
        return self.ideal_s / self.gpu_s

    def params(self, *, latency_s: float = 0.0) -> ScalingParams:
        """Split ``t_ideal`` given a separately measured latency (default: none)."""
        return ScalingParams(
            cpu_serial_s=max(0.0, self.ideal_s - self.gpu_s - latency_s),
            gpu_s=self.gpu_s,
            latency_s=latency_s,
        )

    def predict(self, ratios: Sequence[float]) -> list[float]:
        return [max(self.ideal_s, self.gpu_s * r) for r in ratios]


def fit(ratios: Sequence[float], times_s: Sequence[float]) -> ScalingFit:
    """Least-squares fit of ``t = max(t_ideal, t_GPU·ratio)`` to clients-per-server ratios and times per event.

    Exact: for each split of the points sorted by ratio (the first ones flat, the rest on the line
    through the origin) the two parameters have closed forms; the split with the smallest residual
    of the full model wins. Needs points on both sides of the knee.
    """
    x = np.asarray(ratios, dtype=np.float64)
    y = np.asarray(times_s, dtype=np.float64)
    if x.shape != y.shape or len(x) < 3 or np.any(x <= 0) or np.any(y <= 0):
        msg = "fit needs at least 3 (ratio, time) pairs, all positive, of equal length"
        raise ValueError(msg)
    order = np.argsort(x)
    x, y = x[order], y[order]
    best: tuple[float, float, float] | None = None
    for split in range(1, len(x)):
        ideal = float(y[:split].mean())
        gpu = float((x[split:] * y[split:]).sum() / (x[split:] ** 2).sum())
        residual = float(((np.maximum(ideal, gpu * x) - y) ** 2).sum())
        if best is None or residual < best[0]:
            best = (residual, ideal, gpu)
    assert best is not None
    residual, ideal, gpu = best
    if ideal / gpu >= x[-1] or ideal / gpu <= x[0]:
        raise ValueError(
            f"the measurements do not bracket the saturation point (fitted knee at {ideal / gpu:.3g} clients per "
            f"server, measured {x[0]:.3g}..{x[-1]:.3g}): measure further below and above it"
        )
    return ScalingFit(
        ideal_s=ideal, gpu_s=gpu, rms_residual_s=float(np.sqrt(residual / len(x))), points=len(x)
    )


# Seed 002's figures, seconds per event (ProtoDUNE, ~55k patches per event, 4 T4 GPUs).
PROTODUNE_NON_ML_S = 110.0
PROTODUNE_ML_CPU_S = 220.0
PROTODUNE_PREPROCESS_S = 7.0
PROTODUNE_GPU_S = 2.7
PROTODUNE_TRAVEL_BIG_S = 0.4  # batches of 1693: 32 calls per event
PROTODUNE_TRAVEL_SMALL_S = 2.6  # batches of 235: 235 calls per event
PROTODUNE_BANDWIDTH_S = 1.9
PROTODUNE_GPUS = 4
PROTODUNE_KNEE_PROCESSES_BIG = 270
PROTODUNE_KNEE_PROCESSES_SMALL = 190


def protodune_params(
    *, gpu_s: float = PROTODUNE_GPU_S, travel_s: float = PROTODUNE_TRAVEL_BIG_S
) -> ScalingParams:
    return ScalingParams(
        cpu_serial_s=PROTODUNE_NON_ML_S + PROTODUNE_PREPROCESS_S,
        gpu_s=gpu_s,
        latency_s=PROTODUNE_BANDWIDTH_S + travel_s,
    )


def protodune_derivation() -> dict[str, float]:
    """Every number of the module docstring's ProtoDUNE paragraph."""
    listed = protodune_params()
    knee_ratio_big = PROTODUNE_KNEE_PROCESSES_BIG / PROTODUNE_GPUS
    # t_ideal includes t_GPU: (rest + g) / g = knee  =>  g = rest / (knee - 1)
    implied_gpu_s = (listed.cpu_serial_s + listed.latency_s) / (knee_ratio_big - 1)
    small = protodune_params(travel_s=PROTODUNE_TRAVEL_SMALL_S)
    cpu_only_s = PROTODUNE_NON_ML_S + PROTODUNE_ML_CPU_S
    return {
        "cpu_only_s": cpu_only_s,
        "p": 1 - listed.cpu_serial_s / cpu_only_s,
        "cpu_serial_s": listed.cpu_serial_s,
        "latency_s": listed.latency_s,
        "ideal_s": listed.ideal_s,
        "speedup": cpu_only_s / listed.ideal_s,
        "ratio_with_listed_gpu_s": listed.saturation_ratio,
        "measured_knee_ratio_big_batch": knee_ratio_big,
        "gpu_s_implied_by_knee": implied_gpu_s,
        "ratio_with_implied_gpu_s": protodune_params(gpu_s=implied_gpu_s).saturation_ratio,
        "small_batch_ideal_s": small.ideal_s,
        "small_batch_ratio": small.saturation_ratio,
        "small_batch_knee_processes_predicted": small.saturation_ratio * PROTODUNE_GPUS,
        "small_batch_knee_processes_measured": float(PROTODUNE_KNEE_PROCESSES_SMALL),
    }
