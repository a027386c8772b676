"""``sonic serve``'s options for security, admission, gRPC/HTTP/2 limits, shared memory and the request
buffer budget (docs/server-operations.md, docs/security.md), and the server settings they make."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from sonic.h2.limits import SERVER_LIMITS, Http2Limits
from sonic.server.budget import DEFAULT_WAIT_S
from sonic.server.config import (
    MAX_GRPC_DECOMPRESSED_BYTES,
    AdmissionConfig,
    AuthConfig,
    GrpcServerKind,
    TlsConfig,
)


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security and admission")
    group.add_argument("--tls-cert", type=Path, help="server certificate (PEM) for gRPC and HTTP")
    group.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    group.add_argument("--tls-client-ca", type=Path, help="CA for client certificates: enables mutual TLS")
    group.add_argument(
        "--auth-token-file",
        type=Path,
        help="file of accepted bearer tokens, one per line (kept off the command line)",
    )
    group.add_argument(
        "--auth-jwks", type=Path, help="JSON Web Key Set (local file) to verify JWT bearer tokens"
    )
    group.add_argument("--jwt-audience", default=None, help="required JWT 'aud' claim")
    group.add_argument("--jwt-issuer", default=None, help="required JWT 'iss' claim")
    group.add_argument(
        "--auth-health",
        action="store_true",
        help="health endpoints need a token too (default: open for probes)",
    )
    group.add_argument(
        "--admission-queue-threshold-us",
        type=float,
        default=None,
        help="refuse new clients while queue time per execution is above this (SuperSONIC's rule)",
    )
    group.add_argument("--admission-window-secs", type=float, default=30.0, help="window of the load metric")
    group.add_argument("--max-requests-per-sec", type=float, default=None, help="per client address")
    group.add_argument(
        "--request-burst", type=int, default=100, help="burst allowed above --max-requests-per-sec"
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
    group.add_argument(
        "--grpc-max-header-bytes",
        type=int,
        default=SERVER_LIMITS.max_header_block_bytes,
        help="largest header block of a gRPC request, encoded and decoded (h2)",
    )
    group.add_argument(
        "--grpc-idle-timeout-secs",
        type=float,
        default=SERVER_LIMITS.idle_timeout_s,
        help="close gRPC connections without any call for this long (0: never; h2)",
    )
    group.add_argument(
        "--grpc-keepalive-secs",
        type=float,
        default=SERVER_LIMITS.keepalive_interval_s,
        help="PING silent gRPC connections this often (0: never; h2)",
    )
    group.add_argument(
        "--grpc-keepalive-timeout-secs",
        type=float,
        default=SERVER_LIMITS.ping_timeout_s,
        help="close a gRPC connection whose PING is not answered within this (h2)",
    )
    group.add_argument(
        "--grpc-server",
        choices=[*(kind.value for kind in GrpcServerKind), "native"],
        default=GrpcServerKind.H2.value,
        help="gRPC's HTTP/2 stack: our own (h2, fastest; 'native' is its old name) or grpcio's asyncio server",
    )
    group.add_argument(
        "--http-max-connections-per-client", type=int, default=None, help="open HTTP connections per address"
    )
    budget_help = "MiB of request bodies all connections may buffer (default: 1/4 of memory, 64 MiB-16 GiB)"
    group.add_argument("--request-buffer-budget-mb", type=int, default=None, help=budget_help)
    wait_help = "longest wait for room in that budget, then 503 / RESOURCE_EXHAUSTED"
    group.add_argument("--request-buffer-wait-secs", type=float, default=DEFAULT_WAIT_S, help=wait_help)
    group.add_argument(
        "--disable-repository-control", action="store_true", help="refuse model load/unload requests"
    )
    group.add_argument(
        "--refuse-model-links-outside",
        action="store_true",
        help="refuse model folders and files that are symlinks to places outside the repositories "
        "(default: follow them, as Triton; a load override's names never may)",
    )
    group.add_argument(
        "--allow-model-links-outside",
        action="store_true",
        help="follow symlinks out of the repositories (e.g. CVMFS): the default, kept for old command lines",
    )
    group.add_argument(
        "--allow-shm-from-other-users",
        action="store_true",
        help="register shared memory objects owned by other users (default: the server's user only)",
    )
    group.add_argument(
        "--shm-copy-always",
        action="store_true",
        help="copy every shared memory tensor by system calls, never map a region: no client can crash the "
        "server by shrinking its object, even one of the server's user (default: only objects others can "
        "write are copied)",
    )


def _follow_model_links(args: argparse.Namespace) -> bool:
    if args.refuse_model_links_outside and args.allow_model_links_outside:
        msg = "--refuse-model-links-outside and --allow-model-links-outside ask for opposite things: give one"
        raise ValueError(msg)
    return not args.refuse_model_links_outside


def _read_tokens(path: Path) -> frozenset[str]:
    tokens = frozenset(
        line.strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    )
    if not tokens:
        raise ValueError(f"--auth-token-file {path}: no tokens in the file")
    return tokens


def security_from_args(args: argparse.Namespace) -> dict[str, object]:
    tls = None
    if args.tls_cert is not None or args.tls_key is not None:
        if args.tls_cert is None or args.tls_key is None:
            msg = "TLS needs both --tls-cert and --tls-key"
            raise ValueError(msg)
        tls = TlsConfig(args.tls_cert, args.tls_key, args.tls_client_ca)
    elif args.tls_client_ca is not None:
        msg = "--tls-client-ca needs --tls-cert and --tls-key"
        raise ValueError(msg)
    auth = None
    if args.auth_token_file is not None or args.auth_jwks is not None:
        auth = AuthConfig(
            tokens=_read_tokens(args.auth_token_file) if args.auth_token_file is not None else frozenset(),
            jwks_path=args.auth_jwks,
            jwt_audience=args.jwt_audience,
            jwt_issuer=args.jwt_issuer,
            health_needs_token=args.auth_health,
        )
    admission = (
        AdmissionConfig(args.admission_queue_threshold_us, args.admission_window_secs)
        if args.admission_queue_threshold_us is not None
        else None
    )
    return {
        "tls": tls,
        "auth": auth,
        "admission": admission,
        "max_requests_per_s": args.max_requests_per_sec,
        "request_burst": args.request_burst,
        "grpc_max_concurrent_streams": args.grpc_max_concurrent_streams,
        "grpc_max_decompressed_bytes": args.grpc_max_decompressed_bytes,
        "grpc_http2_limits": _http2_limits(args),
        "grpc_server": GrpcServerKind(args.grpc_server),
        "http_max_connections_per_client": args.http_max_connections_per_client,
        "repository_control": not args.disable_repository_control,
        "allow_model_links_outside": _follow_model_links(args),
        "allow_shm_from_other_users": args.allow_shm_from_other_users,
        "shm_copy_always": args.shm_copy_always,
        "request_buffer_wait_s": args.request_buffer_wait_secs,
        **_budget(args.request_buffer_budget_mb),
    }


def _budget(mib: int | None) -> dict[str, int]:
    if mib is not None and mib < 1:
        raise ValueError(f"--request-buffer-budget-mb must be at least 1, got {mib}")
    return {} if mib is None else {"request_buffer_budget_bytes": mib << 20}


def _http2_limits(args: argparse.Namespace) -> Http2Limits:
    return dataclasses.replace(
        SERVER_LIMITS,
        max_header_block_bytes=args.grpc_max_header_bytes,
        max_header_list_bytes=args.grpc_max_header_bytes,
        idle_timeout_s=args.grpc_idle_timeout_secs or None,
        keepalive_interval_s=args.grpc_keepalive_secs or None,
        ping_timeout_s=args.grpc_keepalive_timeout_secs,
    )
