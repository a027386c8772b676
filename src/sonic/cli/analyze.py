"""``sonic analyze``: sweep server configurations of one model, measure each, keep the best."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sonic.cli.analyze_traffic import add_traffic_arguments, run_traffic
from sonic.cli.perf import add_measurement_arguments, measurement_from_args
from sonic.perf.analyze import AnalyzeConfig, SearchSpace, run_analysis
from sonic.perf.analyze_report import write_outputs
from sonic.perf.engine import LoadLevel
from sonic.perf.inputs import parse_shape
from sonic.perf.ranges import parse_range
from sonic.perf.transport import PerfError


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated non-negative integers")
    return values


def _switches(text: str) -> tuple[bool, ...]:
    mapping = {"on": True, "off": False}
    values = tuple(mapping.get(v.strip()) for v in text.split(","))
    if not values or any(v is None for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected on, off or on,off")
    return tuple(bool(v) for v in values)


def _preferred(text: str) -> tuple[int, ...]:
    return () if text == "none" else _ints(text)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "analyze", help="sweep server configurations of a model with sonic serve and rank them"
    )
    parser.add_argument("--model-repository", type=Path, required=True, help="repository holding the model")
    parser.add_argument("-m", "--model", required=True, help="model name (its directory in the repository)")
    parser.add_argument("--instance-counts", type=_ints, default=(1, 2), help="e.g. 1,2 (default)")
    parser.add_argument("--max-batch-sizes", type=_ints, default=(8, 32), help="e.g. 8,32 (default)")
    parser.add_argument(
        "--dynamic-batching", type=_switches, default=(False, True), help="on,off (default both)"
    )
    parser.add_argument(
        "--preferred-batch-sizes",
        type=_preferred,
        action="append",
        help="one set per use, e.g. 4,8; 'none' for no preference (default: none)",
    )
    parser.add_argument("--max-queue-delays-us", type=_ints, default=(0, 100), help="e.g. 0,100 (default)")
    parser.add_argument(
        "--concurrency", default="1:16:x4", help="load levels, START:END:STEP (default 1:16:x4)"
    )
    parser.add_argument(
        "--objective",
        choices=["throughput", "latency"],
        default="throughput",
        help="rank by the highest inferences/s or the lowest p99 latency",
    )
    parser.add_argument("--max-p99-latency-ms", type=float, default=0.0, help="latency constraint (0: none)")
    parser.add_argument(
        "--time-budget-s", type=float, default=600.0, help="stop starting candidates after this"
    )
    parser.add_argument(
        "--server-arg", action="append", default=[], help="passed to sonic serve, e.g. --server-arg=--gpus=0"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs per candidate, round robin; the best is kept (default 1); with --traffic: paired "
        "rounds against the current configuration (default 3)",
    )
    parser.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        default=Path("analyze-results"),
        help="report.md, report.json, the best config.pbtxt and the plot go here",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG")
    add_measurement_arguments(parser)
    add_traffic_arguments(parser)
    parser.set_defaults(run=run)


def _space(args: argparse.Namespace) -> SearchSpace:
    return SearchSpace(
        instance_counts=args.instance_counts,
        max_batch_sizes=args.max_batch_sizes,
        dynamic_batching=args.dynamic_batching,
        preferred_batch_sizes=tuple(args.preferred_batch_sizes or [()]),
        max_queue_delays_us=args.max_queue_delays_us,
    )


def config_from_args(args: argparse.Namespace) -> AnalyzeConfig:
    space = _space(args)
    return AnalyzeConfig(
        repository=args.model_repository,
        model=args.model,
        levels=tuple(LoadLevel(concurrency=int(c)) for c in parse_range(args.concurrency)),
        space=space,
        batch_size=args.batch_size,
        measurement=measurement_from_args(args),
        objective=args.objective,
        max_p99_latency_ms=args.max_p99_latency_ms,
        time_budget_s=args.time_budget_s,
        repeats=max(1, args.repeats or 1),
        server_args=tuple(args.server_arg),
        input_data=args.input_data,
        shapes=tuple(parse_shape(s) for s in args.shape),
    )


def run(args: argparse.Namespace) -> int:
    if args.traffic is not None:
        return run_traffic(args, _space(args))
    try:
        config = config_from_args(args)
        report = run_analysis(config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (PerfError, OSError) as exc:
        print(f"sonic analyze: {exc}", file=sys.stderr)
        return 1
    written = write_outputs(report, args.output_dir, plots=not args.no_plots)
    if report.best is None:
        print("sonic analyze: no configuration met the constraint; see report.md", file=sys.stderr)
        return 1
    print(f"best: {report.best.result.candidate.name} ({report.best.score:,.1f})")
    for path in written:
        print(f"wrote {path}")
    return 0
