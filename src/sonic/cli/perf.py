"""``sonic perf``: perf_analyzer's role, against ``sonic serve`` or any Triton (KServe v2 gRPC)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from sonic.cli.event_loop import add_loop_argument, loop_factory
from sonic.cli.perf_replay import add_replay_arguments, run_replay
from sonic.perf.engine import LoadLevel, MeasurementConfig, PerfConfig, PerfReport, run_perf
from sonic.perf.inputs import parse_shape
from sonic.perf.perf_analyzer_csv import write_perf_analyzer_csv
from sonic.perf.ranges import parse_range
from sonic.perf.report import row, summary_line, write_csv, write_json
from sonic.perf.shm import DEFAULT_OUTPUT_BYTES, SharedMemoryConfig, SharedMemoryKind
from sonic.perf.stats import Window
from sonic.perf.transport import PerfError, transport_name


def add_measurement_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``sonic analyze``."""
    parser.add_argument("-b", "--batch-size", type=int, default=1, help="samples per request (default 1)")
    parser.add_argument(
        "--measurement-interval-s",
        type=float,
        default=5.0,
        help="length of one measurement window (default 5)",
    )
    parser.add_argument(
        "--stability-percentage",
        type=float,
        default=10.0,
        help="windows are stable when throughput and latency agree within this %% (default 10)",
    )
    parser.add_argument("--stable-windows", type=int, default=3, help="windows that must agree (default 3)")
    parser.add_argument("--max-windows", type=int, default=10, help="windows per level at most (default 10)")
    parser.add_argument(
        "--input-data",
        default="random",
        help="'random' (default), 'zero', or a .json (perf_analyzer format) / .npz file",
    )
    parser.add_argument(
        "--shape", action="append", default=[], help="NAME:D1,D2 for inputs with variable dims (repeatable)"
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "perf", help="measure throughput and latency of a model on a KServe v2 / Triton server"
    )
    parser.add_argument("-m", "--model", help="model name (required unless --replay)")
    parser.add_argument(
        "-u", "--url", default="localhost:8001", help="gRPC HOST:PORT (default localhost:8001)"
    )
    parser.add_argument(
        "-x", "--model-version", default="", help="model version (default: the server's choice)"
    )
    parser.add_argument(
        "--transport",
        choices=["h2", "grpcio", "native"],
        default="h2",
        help="load generator's gRPC stack: sonic.client's HTTP/2 (h2, less CPU; 'native' is its old name) or grpc.aio",
    )
    add_loop_argument(parser)
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="closed loop: START:END:STEP, e.g. 1:64:x2 (default 1)")
    load.add_argument("--request-rate", help="open loop, requests/s: START:END:STEP, e.g. 100:400:100")
    parser.add_argument(
        "--request-distribution",
        choices=["constant", "poisson"],
        default="constant",
        help="open loop spacing",
    )
    add_measurement_arguments(parser)
    parser.add_argument(
        "--shared-memory",
        choices=[kind.value for kind in SharedMemoryKind],
        default=SharedMemoryKind.NONE.value,
        help="where input and output tensors travel, as perf_analyzer's flag: in the requests (none, default) "
        "or in system shared memory regions this process creates and registers (system; the server must be "
        "on this host); cuda is refused (sonic perf has no CUDA)",
    )
    parser.add_argument(
        "--output-shared-memory-size",
        type=int,
        default=None,
        metavar="BYTES",
        help=f"with --shared-memory system: bytes per sample of each output whose size the model does not fix "
        f"(variable dims or BYTES), as perf_analyzer (default {DEFAULT_OUTPUT_BYTES})",
    )
    parser.add_argument("-f", "--csv", type=Path, help="write one row per level here")
    parser.add_argument(
        "--csv-format",
        choices=["sonic", "perf_analyzer"],
        default="sonic",
        help="sonic: every figure sonic perf has (default); perf_analyzer: perf_analyzer 2.51's -f columns",
    )
    parser.add_argument(
        "--verbose-csv",
        action="store_true",
        help="with --csv-format perf_analyzer: add Avg latency, request/response and response wait",
    )
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--plot", type=Path, help="write a PNG here (needs the 'perf' extra)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no live progress")
    parser.add_argument(
        "--allow-errors",
        action="store_true",
        help="exit 0 even when requests failed (they are counted in the summary, CSV and JSON either way)",
    )
    add_replay_arguments(parser)
    parser.set_defaults(run=run)


def measurement_from_args(args: argparse.Namespace) -> MeasurementConfig:
    if args.measurement_interval_s <= 0 or args.stable_windows < 1 or args.max_windows < args.stable_windows:
        msg = "need --measurement-interval-s > 0, --stable-windows >= 1 and --max-windows >= --stable-windows"
        raise PerfError(msg)
    return MeasurementConfig(
        window_s=args.measurement_interval_s,
        stability_percentage=args.stability_percentage,
        stable_windows=args.stable_windows,
        max_windows=args.max_windows,
    )


def levels_from_args(args: argparse.Namespace) -> tuple[LoadLevel, ...]:
    if args.request_rate:
        return tuple(
            LoadLevel(request_rate_per_s=rate, distribution=args.request_distribution)
            for rate in parse_range(args.request_rate)
        )
    return tuple(LoadLevel(concurrency=int(c)) for c in parse_range(args.concurrency or "1"))


def progress(level: LoadLevel, index: int, window: Window, stable: bool) -> None:
    state = "stable" if stable else "measuring"
    print(
        f"  {level.label} window {index}: {window.requests_per_s:,.1f} req/s, mean {window.mean_latency_us:,.0f} us"
        f"{f', {window.errors} errors' if window.errors else ''} ({state})",
        file=sys.stderr,
        flush=True,
    )


def shared_memory_from_args(args: argparse.Namespace) -> SharedMemoryConfig:
    kind = SharedMemoryKind(args.shared_memory)
    if args.output_shared_memory_size is not None and kind is SharedMemoryKind.NONE:
        msg = (
            "--output-shared-memory-size applies with --shared-memory system (tensors travel in the requests)"
        )
        raise PerfError(msg)
    size = DEFAULT_OUTPUT_BYTES if args.output_shared_memory_size is None else args.output_shared_memory_size
    return SharedMemoryConfig(kind, size)


def config_from_args(args: argparse.Namespace) -> PerfConfig:
    return PerfConfig(
        url=args.url,
        model=args.model,
        version=args.model_version,
        levels=levels_from_args(args),
        batch_size=args.batch_size,
        input_data=args.input_data,
        shapes=tuple(parse_shape(s) for s in args.shape),
        measurement=measurement_from_args(args),
        transport=transport_name(args.transport),
        shared_memory=shared_memory_from_args(args),
    )


def write_outputs(report: PerfReport, args: argparse.Namespace) -> None:
    """Write the files asked for, and say where each went."""
    rows = [row(r, report.config.shared_memory.kind) for r in report.results]
    if args.csv and args.csv_format == "perf_analyzer":
        write_perf_analyzer_csv(report, args.csv, verbose=args.verbose_csv)
    elif args.csv:
        write_csv(rows, args.csv)
    if args.csv:
        print(f"sonic perf: wrote CSV ({args.csv_format} columns) to {args.csv}", file=sys.stderr)
    if args.json:
        write_json(report, args.json)
        print(f"sonic perf: wrote JSON to {args.json}", file=sys.stderr)
    if args.plot:
        from sonic.perf.plot import plot_perf  # noqa: PLC0415  (matplotlib is optional)

        plot_perf(
            rows, args.plot, title=f"{report.config.model} batch {report.config.batch_size} at {args.url}"
        )
        print(f"sonic perf: wrote PNG to {args.plot}", file=sys.stderr)


def memory_note(config: PerfConfig) -> str:
    memory = config.shared_memory
    if not memory.used:
        return ""
    return f", tensors in system shared memory (--output-shared-memory-size {memory.output_bytes})"


def failure_status(failed: int, args: argparse.Namespace) -> int:
    """1 when requests failed (figures of a server answering errors are not the model's), unless allowed."""
    if not failed:
        return 0
    if args.allow_errors:
        print(f"sonic perf: {failed} requests failed (--allow-errors: exit status 0)", file=sys.stderr)
        return 0
    print(f"sonic perf: {failed} requests failed; exit status 1 (--allow-errors to accept)", file=sys.stderr)
    return 1


def options_error(args: argparse.Namespace) -> str | None:
    """The options that would otherwise be accepted and ignored (CSV, shared memory)."""
    if args.replay is not None and (args.csv is not None or args.csv_format != "sonic" or args.verbose_csv):
        return "--replay reports with --json; -f/--csv, --csv-format and --verbose-csv are for load levels"
    if args.replay is not None and (
        args.shared_memory != "none" or args.output_shared_memory_size is not None
    ):
        return "--replay sends the recorded requests as they were; --shared-memory is for load levels"
    if args.csv_format != "sonic" and args.csv is None:
        return f"--csv-format {args.csv_format} needs -f/--csv FILE"
    if args.verbose_csv and args.csv_format != "perf_analyzer":
        return (
            "--verbose-csv applies to --csv-format perf_analyzer (the sonic format has every column already)"
        )
    return None


def run(args: argparse.Namespace) -> int:
    problem = options_error(args)
    if problem is not None:
        print(f"sonic perf: {problem}", file=sys.stderr)
        return 2
    if args.replay is not None:
        return run_replay(args)
    if not args.model:
        print("sonic perf: -m/--model is required (or --replay DIR)", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args)
        print(
            f"sonic perf: model '{config.model}' at {config.url}, batch {config.batch_size}{memory_note(config)}",
            file=sys.stderr,
        )
        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            report = runner.run(run_perf(config, on_window=None if args.quiet else progress))
        for note in report.notes:
            print(f"sonic perf: note: {note}", file=sys.stderr)
        for result in report.results:
            print(summary_line(result, config.shared_memory.kind))
        write_outputs(report, args)
    except PerfError as exc:
        print(f"sonic perf: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"sonic perf: {exc}", file=sys.stderr)
        return 2
    return failure_status(sum(r.errors_all_windows for r in report.results), args)
