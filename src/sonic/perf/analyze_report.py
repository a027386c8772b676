"""Files ``sonic analyze`` writes: the best ``config.pbtxt``, ``report.json``, ``report.md`` and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sonic.perf.analyze import AnalysisReport, Ranked
from sonic.perf.report import row
from sonic.perf.shm import SharedMemoryKind


def _candidate_json(entry: Ranked, place: int | None) -> dict[str, Any]:
    result = entry.result
    return {
        "rank": place,
        "name": result.candidate.name,
        "instance_count": result.candidate.instance_count,
        "max_batch_size": result.candidate.max_batch_size,
        "dynamic_batching": result.candidate.dynamic_batching,
        "preferred_batch_sizes": list(result.candidate.preferred_batch_sizes),
        "max_queue_delay_us": result.candidate.max_queue_delay_us,
        "score": entry.score,
        "error": result.error,
        "measured_s": round(result.measured_s, 2),
        "runs": result.runs,
        # sonic analyze sends its tensors in the requests
        "levels": [row(r, SharedMemoryKind.NONE) for r in result.results],
        "config_pbtxt": result.config_text,
    }


def to_json(report: AnalysisReport) -> dict[str, Any]:
    config = report.config
    places = [index + 1 if entry.score is not None else None for index, entry in enumerate(report.ranked)]
    return {
        "tool": "sonic analyze",
        "model": config.model,
        "repository": str(config.repository),
        "objective": config.objective,
        "max_p99_latency_ms": config.max_p99_latency_ms,
        "batch_size": config.batch_size,
        "levels": [level.label for level in config.levels],
        "time_budget_s": config.time_budget_s,
        "repeats": config.repeats,
        "elapsed_s": round(report.elapsed_s, 2),
        "best": report.best.result.candidate.name if report.best else None,
        "candidates": [_candidate_json(e, p) for e, p in zip(report.ranked, places, strict=True)],
    }


def to_markdown(report: AnalysisReport) -> str:
    config = report.config
    unit = "infer/s" if config.objective == "throughput" else "p99 ms"
    constraint = f"p99 <= {config.max_p99_latency_ms:g} ms" if config.max_p99_latency_ms > 0 else "none"
    lines = [
        f"# sonic analyze: {config.model}",
        "",
        (
            f"Objective: {config.objective} ({unit}); latency constraint: {constraint}; batch size {config.batch_size}; "
            f"levels: {', '.join(level.label for level in config.levels)}; {report.elapsed_s:.0f} s in all."
        ),
        "",
        f"| rank | configuration | score ({unit}) | best level | p99 ms there | server batch there | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for index, entry in enumerate(report.ranked):
        level = entry.best_level
        place = str(index + 1) if entry.score is not None else "-"
        score = f"{entry.score:,.1f}" if entry.score is not None else "-"
        where = level.level.label if level else "-"
        p99 = f"{level.latency.p99_us / 1000:,.2f}" if level else "-"
        batch = f"{level.server.average_batch:.1f}" if level and level.server else "-"
        note = entry.result.error or ("" if entry.score is not None else "latency constraint not met")
        lines.append(
            f"| {place} | {entry.result.candidate.name} | {score} | {where} | {p99} | {batch} | {note} |"
        )
    if report.best:
        lines += ["", "Best configuration:", "", "```", report.best.result.config_text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def plot_analysis(report: AnalysisReport, path: Path) -> None:
    from sonic.perf.plot import require_matplotlib  # noqa: PLC0415  (matplotlib is optional)

    plt = require_matplotlib()
    figure, axis = plt.subplots(figsize=(9, 5))
    for entry in report.ranked:
        results = entry.result.results
        if not results:
            continue
        axis.plot(
            [r.latency.p99_us / 1000 for r in results],
            [r.inferences_per_s for r in results],
            marker="o",
            label=entry.result.candidate.name,
        )
    if report.config.max_p99_latency_ms > 0:
        axis.axvline(report.config.max_p99_latency_ms, color="k", linestyle="--", label="p99 constraint")
    axis.set_xlabel("p99 latency (ms)")
    axis.set_ylabel("inferences / s")
    axis.set_title(f"sonic analyze: {report.config.model}")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_outputs(report: AnalysisReport, directory: Path, *, plots: bool = True) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    if report.best is not None:
        best = directory / "config.pbtxt"
        best.write_text(report.best.result.config_text, encoding="utf-8")
        written.append(best)
    for name, text in (
        ("report.json", json.dumps(to_json(report), indent=2) + "\n"),
        ("report.md", to_markdown(report)),
    ):
        (directory / name).write_text(text, encoding="utf-8")
        written.append(directory / name)
    if plots:
        try:
            plot_analysis(report, directory / "throughput_vs_p99.png")
            written.append(directory / "throughput_vs_p99.png")
        except ImportError:
            pass
    return written
