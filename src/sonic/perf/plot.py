"""PNG plots of ``sonic perf`` rows: throughput against p99 latency, and where the latency goes.

matplotlib is optional (the ``perf`` extra); :func:`require_matplotlib` says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sonic.perf.report import Row

BREAKDOWN = (
    ("server_queue_us", "server queue"),
    ("server_compute_input_us", "compute input"),
    ("server_compute_infer_us", "compute infer"),
    ("server_compute_output_us", "compute output"),
    ("server_overhead_us", "server overhead"),
    ("client_wire_us", "client send/recv"),
)  # client deserialize time comes after the latency is taken, so it is not stacked


def require_matplotlib() -> Any:
    try:
        import matplotlib as mpl  # noqa: PLC0415  (optional dependency)
    except ImportError:
        message = "plots need matplotlib: pip install 'sonic-inference[perf]'"
        raise ImportError(message) from None
    mpl.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def level_label(values: Row) -> str:
    if values["concurrency"]:
        return f"c{values['concurrency']}"
    return f"{values['request_rate_per_s']:g}/s"


def plot_perf(rows: Sequence[Row], path: Path, *, title: str) -> None:
    plt = require_matplotlib()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    p99_ms = [r["latency_p99_us"] / 1000 for r in rows]
    throughput = [r["inferences_per_s"] for r in rows]
    left.plot(p99_ms, throughput, marker="o")
    for values, x, y in zip(rows, p99_ms, throughput, strict=True):
        left.annotate(level_label(values), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    left.set_xlabel("p99 latency (ms)")
    left.set_ylabel("inferences / s")
    left.set_title("throughput vs p99 latency")
    left.grid(alpha=0.3)
    labels = [level_label(r) for r in rows]
    bottom = [0.0] * len(rows)
    for key, name in BREAKDOWN:
        heights = [(r[key] or 0.0) / 1000 for r in rows]
        right.bar(labels, heights, bottom=bottom, label=name)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    right.plot(
        labels, [r["latency_mean_us"] / 1000 for r in rows], "k_", markersize=20, label="client mean latency"
    )
    right.set_ylabel("ms per request")
    right.set_title("latency breakdown (averages)")
    right.legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_scaling(
    ratios: Sequence[float],
    measured_s: Sequence[float],
    curves: dict[str, tuple[Sequence[float], Sequence[float]]],
    path: Path,
    *,
    title: str,
) -> None:
    """Time per event against clients per server: measured points and predicted curves."""
    plt = require_matplotlib()
    figure, axis = plt.subplots(figsize=(7, 4.5))
    if ratios:
        axis.plot(ratios, measured_s, "ko", label="measured")
    for name, (x, y) in curves.items():
        axis.plot(x, y, label=name)
    axis.set_xlabel("clients per server")
    axis.set_ylabel("time per event (s)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
