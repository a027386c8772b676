"""``sonic analyze --traffic DIR --slo-p99-ms X``: recommend a configuration from recorded traffic."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sonic.perf.analyze import SearchSpace
from sonic.perf.analyze_traffic import TrafficAnalysis, TrafficAnalyzeConfig, Trial, run_traffic_analysis
from sonic.perf.decide import Verdict
from sonic.perf.transport import PerfError
from sonic.protocol.model_config import CONFIG_FILENAME

TRAFFIC_REPEATS = 3  # --repeats' default with --traffic: paired rounds (one replay's noise is x2 here)


def add_traffic_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tuning on recorded traffic (sonic serve --traffic-log)")
    group.add_argument(
        "--traffic", type=Path, default=None, metavar="DIR", help="replay this trace per candidate"
    )
    group.add_argument("--slo-p99-ms", type=float, default=0.0, help="the p99 latency a candidate must meet")
    group.add_argument("--time-scale", type=float, default=1.0, help="replay K times faster than recorded")
    group.add_argument(
        "--write", action="store_true", help="write the recommended config.pbtxt (old one kept as .orig)"
    )
    group.add_argument(
        "--jobs-recorded", type=int, default=0, help="jobs that sent the trace (for the scaling model)"
    )
    group.add_argument("--jobs", type=int, default=0, help="jobs to size the servers for")


def _verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "name": verdict.name,
        "p99_ratios_per_round": [round(r, 4) for r in verdict.ratios],
        "median_ratio": verdict.median_ratio,
        "spread": verdict.spread,
        "median_p99_ms": verdict.median_p99_ms,
        "qualifies": verdict.qualifies,
        "beats_current": verdict.beats_current,
        "why": verdict.why,
    }


def _trial_json(trial: Trial) -> dict[str, Any]:
    return {
        "name": trial.name,
        "config_text": trial.config_text,
        "p99_ms": trial.p99_ms,  # median over the rounds
        "mean_ms": trial.mean_ms,
        "failed": trial.failed,
        "rounds": [asdict(r) for r in trial.rounds],
        "error": trial.error,
    }


def to_json(analysis: TrafficAnalysis, jobs_recorded: int, jobs: int) -> dict[str, Any]:
    decision = analysis.decision
    recommended = analysis.recommended
    gain = None
    if decision.recommended is not None and decision.recommended.median_ratio:
        gain = round(1 / decision.recommended.median_ratio, 3)
    load = analysis.load
    scaling: dict[str, Any] = {
        "requests": load.requests,
        "wall_s": round(load.wall_s, 3),
        "server_s": round(load.server_s, 3),
        "utilisation": round(load.utilisation, 4),
    }
    if jobs_recorded:
        scaling["jobs_per_server"] = round(load.jobs_per_server(jobs_recorded), 2)
        if jobs:
            scaling["servers_for_jobs"] = {"jobs": jobs, "servers": load.servers_for(jobs, jobs_recorded)}
    return {
        "slo_p99_ms": analysis.config.slo_p99_ms,
        "time_scale": analysis.config.time_scale,
        "repeats": analysis.config.repeats,
        "current": _trial_json(analysis.current),
        "candidates": [_trial_json(trial) for trial in analysis.candidates],
        "verdicts": [_verdict_json(v) for v in decision.verdicts],
        "keep_current": decision.keep_current,
        "recommended": _trial_json(recommended) if recommended is not None else None,
        "p99_gain_over_current": gain,  # 1 / the median paired p99 ratio
        "scaling": scaling,
        "elapsed_s": round(analysis.elapsed_s, 1),
    }


def _ms(value: float | None) -> str:
    return f"{value:.2f} ms" if value is not None else "-"


def _print_verdicts(analysis: TrafficAnalysis) -> None:
    for verdict in analysis.decision.verdicts:
        ratios = ", ".join(f"{r:.2f}" for r in verdict.ratios) or "-"
        median = (
            f"{verdict.median_ratio:.3f} ±{verdict.spread:.3f}" if verdict.median_ratio is not None else "-"
        )
        print(
            f"  {verdict.name}: p99 {_ms(verdict.median_p99_ms)}, ratio to current per round [{ratios}], "
            f"median {median}: {verdict.why}"
        )
    for trial in analysis.candidates:
        if not trial.rounds:
            print(f"  {trial.name}: {trial.error}")


def run_traffic(args: argparse.Namespace, space: SearchSpace) -> int:
    if args.slo_p99_ms <= 0:
        print("sonic analyze: --traffic needs --slo-p99-ms > 0", file=sys.stderr)
        return 2
    config = TrafficAnalyzeConfig(
        repository=args.model_repository,
        model=args.model,
        traffic_dir=args.traffic,
        slo_p99_ms=args.slo_p99_ms,
        space=space,
        time_scale=args.time_scale,
        repeats=max(1, args.repeats if args.repeats is not None else TRAFFIC_REPEATS),
        time_budget_s=args.time_budget_s,
        server_args=tuple(args.server_arg),
    )
    try:
        analysis = run_traffic_analysis(
            config, progress=lambda line: print(line, file=sys.stderr, flush=True)
        )
    except (PerfError, OSError, ValueError) as exc:
        print(f"sonic analyze: {exc}", file=sys.stderr)
        return 1
    report = to_json(analysis, args.jobs_recorded, args.jobs)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "traffic-analysis.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    current, recommended = analysis.current, analysis.recommended
    rounds = ", ".join(_ms(r.p99_ms) for r in current.rounds)
    print(
        f"current: p99 {_ms(current.p99_ms)} (median of {config.repeats} rounds: {rounds}), "
        f"{current.failed} failed"
    )
    scaling = report["scaling"]
    print(f"server utilisation in the trace: {scaling['utilisation']:.3f}")
    if "jobs_per_server" in scaling:
        print(f"jobs per server at the knee: {scaling['jobs_per_server']}")
    if "servers_for_jobs" in scaling:
        print(f"servers for {args.jobs} jobs: {scaling['servers_for_jobs']['servers']}")
    print("candidates, best median p99 ratio first (ratio < 1: better than current):")
    _print_verdicts(analysis)
    if recommended is None:
        print("keep the current configuration: no candidate beat it beyond the spread of the rounds")
        if current.meets(args.slo_p99_ms):
            return 0
        print(
            f"sonic analyze: the current configuration misses p99 <= {args.slo_p99_ms} ms on this trace "
            "and no candidate did better beyond the noise",
            file=sys.stderr,
        )
        return 1
    print(
        f"recommended: {recommended.name}: p99 {_ms(recommended.p99_ms)} "
        f"(x{report['p99_gain_over_current']} vs current, median of the paired rounds)"
    )
    print(recommended.config_text)
    if args.write:
        config_path = args.model_repository / args.model / CONFIG_FILENAME
        if config_path.is_file():
            shutil.copyfile(config_path, config_path.with_name(CONFIG_FILENAME + ".orig"))
            kept = f"the old one is {CONFIG_FILENAME}.orig"
        else:
            kept = "there was none: the model was auto-completed"
        config_path.write_text(recommended.config_text, encoding="utf-8")
        print(f"wrote {config_path} ({kept})")
    return 0
