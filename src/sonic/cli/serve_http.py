"""``sonic serve``'s HTTP/REST and Prometheus metrics options (docs/server-operations.md)."""

from __future__ import annotations

import argparse

from sonic.server.config import HttpConfig, MetricsConfig


def add_http_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("HTTP/REST")
    group.add_argument("--http-port", type=int, default=None, help="KServe v2 HTTP/REST port (0: a free one)")
    group.add_argument(
        "--http-max-connections-per-client", type=int, default=None, help="open HTTP connections per address"
    )


def http_config_from_args(args: argparse.Namespace, header_forward_pattern: str = "") -> HttpConfig:
    """``header_forward_pattern``: Triton's ``--http-header-forward-pattern`` (``cli/triton_flags.py``)."""
    return HttpConfig(
        port=args.http_port,
        max_connections_per_client=args.http_max_connections_per_client,
        header_forward_pattern=header_forward_pattern,
    )


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics")
    group.add_argument(
        "--metrics-port", type=int, default=None, help="Prometheus /metrics port (0: a free one)"
    )
    group.add_argument(
        "--no-metrics-histograms",
        action="store_true",
        help="leave out the per-request latency histograms (the nv_* counters stay)",
    )


def metrics_config_from_args(args: argparse.Namespace) -> MetricsConfig:
    return MetricsConfig(port=args.metrics_port, histograms=not args.no_metrics_histograms)
