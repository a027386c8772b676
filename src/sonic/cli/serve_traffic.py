"""``sonic serve --traffic-log DIR`` and its limits (docs/perf.md, "Recording traffic")."""

from __future__ import annotations

import argparse
from pathlib import Path

from sonic.traffic.config import TrafficLogConfig


def add_traffic_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "traffic recording (for sonic perf --replay and sonic analyze --traffic)"
    )
    group.add_argument(
        "--traffic-log",
        type=Path,
        default=None,
        metavar="DIR",
        help="record every request to Parquet files here (the only way to name the folder)",
    )
    group.add_argument(
        "--traffic-log-start",
        choices=["on", "off"],
        default=None,
        help="off: record only once the log-settings API sets traffic_log true (default: on)",
    )
    group.add_argument(
        "--traffic-log-max-file-mb", type=float, default=64.0, help="a file closes past this size"
    )
    group.add_argument(
        "--traffic-log-max-total-mb", type=float, default=1024.0, help="the oldest files go past this total"
    )
    group.add_argument(
        "--traffic-log-sample-contents-every",
        type=int,
        default=0,
        metavar="N",
        help="keep the input bytes of every N-th request (0: never)",
    )
    group.add_argument(
        "--traffic-log-max-contents-kb",
        type=float,
        default=1024.0,
        help="a sampled request with more input bytes is recorded without them",
    )


def traffic_config_from_args(args: argparse.Namespace) -> TrafficLogConfig | None:
    if args.traffic_log is None:
        if args.traffic_log_start is not None:
            msg = f"--traffic-log-start {args.traffic_log_start} needs --traffic-log DIR (where to record)"
            raise ValueError(msg)
        return None
    return TrafficLogConfig(
        directory=args.traffic_log,
        enabled=args.traffic_log_start != "off",
        max_file_bytes=int(args.traffic_log_max_file_mb * (1 << 20)),
        max_total_bytes=int(args.traffic_log_max_total_mb * (1 << 20)),
        sample_contents_every=args.traffic_log_sample_contents_every,
        max_contents_bytes=int(args.traffic_log_max_contents_kb * 1024),
    )
