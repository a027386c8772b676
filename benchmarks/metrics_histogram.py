"""What ``--metrics-port`` adds per request: ``ModelStats.record_success`` with and without the latency
histograms, in process (the nv_* counters are rendered at scrape time from statistics kept anyway).

    .venv/bin/python -m benchmarks.metrics_histogram

``benchmarks.server_http`` runs it too and relates it to the server CPU per request it measured.
"""

from __future__ import annotations

import json
import time

from sonic.server.metrics.stats import ModelStats, RequestTiming


def histogram_cost_ns(calls: int = 200_000) -> dict[str, float]:
    """What metrics add per request: ModelStats.record_success with and without latency histograms.

    The nv_* counters cost nothing extra (rendered at scrape time from statistics kept anyway);
    the histograms' per-request observation is the only addition, measured here directly.
    """
    timing = RequestTiming(
        queue_ns=12_000, compute_input_ns=3_000, compute_infer_ns=250_000, compute_output_ns=2_000
    )
    result = {}
    for label, histograms in (("off", False), ("on", True)):
        best = float("inf")
        for _ in range(5):
            stats = ModelStats()
            if histograms:
                stats.enable_histograms()
            began = time.perf_counter_ns()
            for index in range(calls):
                stats.record_success(300_000 + index, timing, 1)
            best = min(best, (time.perf_counter_ns() - began) / calls)
        result[f"record_success_{label}_ns"] = best
    result["histogram_added_ns"] = result["record_success_on_ns"] - result["record_success_off_ns"]
    return result


if __name__ == "__main__":
    print(json.dumps(histogram_cost_ns(), indent=2))
