"""``sonic serve``'s gRPC options: port, HTTP/2 stack, message and HTTP/2 limits (docs/server-operations.md)."""

from __future__ import annotations

import argparse
import dataclasses

from sonic.h2.limits import SERVER_LIMITS, Http2Limits
from sonic.server.config import MAX_GRPC_DECOMPRESSED_BYTES, GrpcConfig, GrpcServerKind


def add_grpc_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("gRPC")
    group.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (0: pick a free one)")
    group.add_argument(
        "--grpc-server",
        choices=[*(kind.value for kind in GrpcServerKind), "native"],
        default=GrpcServerKind.H2.value,
        help="gRPC's HTTP/2 stack: our own (h2, fastest; 'native' is its old name) or grpcio's asyncio server",
    )
    group.add_argument(
        "--grpc-max-concurrent-streams",
        type=int,
        default=None,
        help=f"per gRPC connection (h2 default {SERVER_LIMITS.max_concurrent_streams}; grpcio: unlimited)",
    )
    group.add_argument(
        "--grpc-max-decompressed-bytes",
        type=int,
        default=MAX_GRPC_DECOMPRESSED_BYTES,
        help="largest gRPC message once inflated (gzip/deflate); larger ones get RESOURCE_EXHAUSTED",
    )
    _add_http2_arguments(group)


def _add_http2_arguments(group: argparse._ArgumentGroup) -> None:
    """The h2 stack's limits (``Http2Limits``); grpcio's server has no equivalent."""
    limits = SERVER_LIMITS
    options: tuple[tuple[str, type[int | float], float | None, str], ...] = (
        ("--grpc-max-header-bytes", int, limits.max_header_block_bytes,
         "largest header block of a gRPC request, encoded and decoded (h2)"),
        ("--grpc-idle-timeout-secs", float, limits.idle_timeout_s,
         "close gRPC connections without any call for this long (0: never; h2)"),
        ("--grpc-keepalive-secs", float, limits.keepalive_interval_s,
         "PING silent gRPC connections this often (0: never; h2)"),
        ("--grpc-keepalive-timeout-secs", float, limits.ping_timeout_s,
         "close a gRPC connection whose PING is not answered within this (h2)"),
    )  # fmt: skip
    for flag, kind, default, help_text in options:
        group.add_argument(flag, type=kind, default=default, help=help_text)


def grpc_config_from_args(args: argparse.Namespace, header_forward_pattern: str = "") -> GrpcConfig:
    """``header_forward_pattern``: Triton's ``--grpc-header-forward-pattern`` (``cli/triton_flags.py``)."""
    return GrpcConfig(
        port=args.grpc_port,
        server=GrpcServerKind(args.grpc_server),
        max_concurrent_streams=args.grpc_max_concurrent_streams,
        max_decompressed_bytes=args.grpc_max_decompressed_bytes,
        http2_limits=_http2_limits(args),
        header_forward_pattern=header_forward_pattern,
    )


def _http2_limits(args: argparse.Namespace) -> Http2Limits:
    return dataclasses.replace(
        SERVER_LIMITS,
        max_header_block_bytes=args.grpc_max_header_bytes,
        max_header_list_bytes=args.grpc_max_header_bytes,
        idle_timeout_s=args.grpc_idle_timeout_secs or None,
        keepalive_interval_s=args.grpc_keepalive_secs or None,
        ping_timeout_s=args.grpc_keepalive_timeout_secs,
    )
