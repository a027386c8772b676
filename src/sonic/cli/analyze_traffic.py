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
from sonic.perf.analyze_traffic import TrafficAnalysis, TrafficAnalyzeConfig, run_traffic_analysis
from sonic.perf.transport import PerfError
from sonic.protocol.model_config import CONFIG_FILENAME


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


def to_json(analysis: TrafficAnalysis, jobs_recorded: int, jobs: int) -> dict[str, Any]:
    recommended = analysis.recommended
    current = analysis.current
    gain = None
    if recommended is not None and current.p99_ms and recommended.p99_ms:
        gain = round(current.p99_ms / recommended.p99_ms, 3)
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
        "current": asdict(current),
        "candidates": [asdict(trial) for trial in analysis.candidates],
        "recommended": asdict(recommended) if recommended is not None else None,
        "p99_gain_over_current": gain,
        "scaling": scaling,
        "elapsed_s": round(analysis.elapsed_s, 1),
    }


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
        repeats=max(1, args.repeats),
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
    print(f"current: p99 {current.p99_ms} ms, {current.failed} failed {current.error}".rstrip())
    scaling = report["scaling"]
    print(f"server utilisation in the trace: {scaling['utilisation']:.3f}")
    if "jobs_per_server" in scaling:
        print(f"jobs per server at the knee: {scaling['jobs_per_server']}")
    if "servers_for_jobs" in scaling:
        print(f"servers for {args.jobs} jobs: {scaling['servers_for_jobs']['servers']}")
    if recommended is None:
        print(
            f"sonic analyze: no configuration met p99 <= {args.slo_p99_ms} ms on this trace", file=sys.stderr
        )
        return 1
    print(
        f"recommended: {recommended.name}: p99 {recommended.p99_ms:.2f} ms (x{report['p99_gain_over_current']} vs current)"
    )
    print(recommended.config_text)
    if args.write and recommended.name != "current":
        config_path = args.model_repository / args.model / CONFIG_FILENAME
        shutil.copyfile(config_path, config_path.with_name(CONFIG_FILENAME + ".orig"))
        config_path.write_text(recommended.config_text, encoding="utf-8")
        print(f"wrote {config_path} (the old one is {CONFIG_FILENAME}.orig)")
    return 0
