"""docs/compare.png: one panel per workload, each server's median with its min-max range."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.compare.summary import COLUMNS, UNITS

COLORS = {
    "sonic": "tab:blue",
    "sonic-grpcio": "tab:cyan",
    "triton": "tab:green",
    "mlserver": "tab:orange",
    "direct": "tab:gray",
}


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib as mpl  # noqa: PLC0415  (a dev dependency, only needed here)

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names, colors = COLUMNS, COLORS
    items = list(summary.values())
    columns = 4
    rows_count = (len(items) + columns - 1) // columns
    figure, axes = plt.subplots(rows_count, columns, figsize=(4 * columns, 3.2 * rows_count), squeeze=False)
    for axis, item in zip(axes.flat, items, strict=False):
        present = [n for n in names if n in item["servers"]]
        title = item["label"]
        served = [item["servers"][n]["median"] for n in present if n != "direct"]
        if "direct" in present and served and item["servers"]["direct"]["median"] > 5 * max(served):
            # The in-process ceiling of a tiny model would flatten the servers' bars: give it in the title.
            present.remove("direct")
            title += f"\n(direct {item['servers']['direct']['median']:,.0f}, off scale)"
        medians = [item["servers"][n]["median"] for n in present]
        low = [m - item["servers"][n]["min"] for n, m in zip(present, medians, strict=True)]
        high = [item["servers"][n]["max"] - m for n, m in zip(present, medians, strict=True)]
        axis.bar(
            range(len(present)), medians, yerr=[low, high], color=[colors[n] for n in present], capsize=3
        )
        axis.set_xticks(range(len(present)), present, rotation=30, ha="right", fontsize=8)
        axis.set_title(title, fontsize=9)
        axis.set_ylabel(UNITS[item["metric"]], fontsize=8)
        axis.tick_params(axis="y", labelsize=8)
    for axis in list(axes.flat)[len(items) :]:
        axis.axis("off")
    figure.suptitle(
        "Same machine, same run: median over rounds, bars span min-max (2 shared cores)", fontsize=10
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
