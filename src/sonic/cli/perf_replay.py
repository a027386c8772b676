"""``sonic perf --replay DIR``: send a recorded traffic log again and report it (sonic.perf.replay)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sonic.perf.replay import ReplayConfig, ReplayReport, replay
from sonic.perf.transport import PerfError, transport_name


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("replay of recorded traffic (sonic serve --traffic-log)")
    group.add_argument(
        "--replay", type=Path, default=None, metavar="DIR", help="send the requests recorded here"
    )
    group.add_argument("--time-scale", type=float, default=1.0, help="replay K times faster than recorded")
    group.add_argument("--replay-model", action="append", default=[], help="only this model (repeatable)")
    group.add_argument("--replay-max-requests", type=int, default=0, help="only the first N requests")
    group.add_argument(
        "--replay-synthetic", action="store_true", help="synthetic inputs even where contents were recorded"
    )


def report_json(report: ReplayReport) -> dict[str, Any]:
    models = {}
    for name, result in report.models.items():
        models[name] = {
            "sent": result.sent,
            "failed": result.failed,
            "last_error": result.last_error,
            "requests_per_s": round(len(result.latencies_ns) / report.duration_s, 3)
            if report.duration_s
            else 0.0,
            "inferences_per_s": round(result.inferences / report.duration_s, 3) if report.duration_s else 0.0,
            "latency_us": asdict(result.latency),
            "server": asdict(result.server) if result.server is not None else None,
        }
    return {
        "duration_s": round(report.duration_s, 3),
        "requests": report.requests,
        "late": report.late,
        "fidelity": round(report.fidelity, 4),
        "recorded_per_s": report.recorded_per_s,
        "sent_per_s": report.sent_per_s,
        "models": models,
    }


def run_replay(args: argparse.Namespace) -> int:
    config = ReplayConfig(
        traffic_dir=args.replay,
        address=args.url,
        time_scale=args.time_scale,
        models=tuple(args.replay_model),
        transport=transport_name(args.transport),
        use_contents=not args.replay_synthetic,
        max_requests=args.replay_max_requests,
    )
    try:
        report = asyncio.run(replay(config))
    except PerfError as exc:
        print(f"sonic perf: {exc}", file=sys.stderr)
        return 1
    summary = report_json(report)
    print(
        f"replay: {summary['requests']} requests in {summary['duration_s']} s, fidelity {summary['fidelity']}, "
        f"{summary['late']} late"
    )
    for name, model in summary["models"].items():
        latency = model["latency_us"]
        print(
            f"  {name}: {model['requests_per_s']} req/s, {model['inferences_per_s']} infer/s, "
            f"p50 {latency['p50_us']:.0f} us, p99 {latency['p99_us']:.0f} us, {model['failed']} failed"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2), encoding="utf-8")
        print(f"sonic perf: wrote JSON to {args.json}", file=sys.stderr)
    failed = sum(int(model["failed"]) for model in summary["models"].values())
    if failed and not args.allow_errors:
        print(
            f"sonic perf: {failed} requests failed; exit status 1 (--allow-errors to accept)", file=sys.stderr
        )
        return 1
    return 0
