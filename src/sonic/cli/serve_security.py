"""``sonic serve``'s options for security and admission: TLS, tokens, request rate, admission, what model
control, model links and shared memory may do (docs/server-operations.md, docs/security.md), and the
:class:`SecurityConfig` they make."""

from __future__ import annotations

import argparse
from pathlib import Path

from sonic.server.config import AdmissionConfig, AuthConfig, SecurityConfig, TlsConfig


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security and admission")
    _add_tls_arguments(group)
    _add_auth_arguments(group)
    _add_admission_arguments(group)
    _add_reach_arguments(group)


def _add_tls_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--tls-cert", type=Path, help="server certificate (PEM) for gRPC and HTTP")
    group.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    group.add_argument("--tls-client-ca", type=Path, help="CA for client certificates: enables mutual TLS")


def _add_auth_arguments(group: argparse._ArgumentGroup) -> None:
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


def _add_admission_arguments(group: argparse._ArgumentGroup) -> None:
    """SuperSONIC's admission rule and the per-address request rate."""
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


def _add_reach_arguments(group: argparse._ArgumentGroup) -> None:
    """What a caller may change (model control) or reach (files through links, shared memory)."""
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


def security_config_from_args(args: argparse.Namespace) -> SecurityConfig:
    return SecurityConfig(
        tls=_tls(args),
        auth=_auth(args),
        admission=_admission(args),
        max_requests_per_s=args.max_requests_per_sec,
        request_burst=args.request_burst,
        repository_control=not args.disable_repository_control,
        allow_model_links_outside=_follow_model_links(args),
        allow_shm_from_other_users=args.allow_shm_from_other_users,
        shm_copy_always=args.shm_copy_always,
    )


def _tls(args: argparse.Namespace) -> TlsConfig | None:
    if args.tls_cert is not None or args.tls_key is not None:
        if args.tls_cert is None or args.tls_key is None:
            msg = "TLS needs both --tls-cert and --tls-key"
            raise ValueError(msg)
        return TlsConfig(args.tls_cert, args.tls_key, args.tls_client_ca)
    if args.tls_client_ca is not None:
        msg = "--tls-client-ca needs --tls-cert and --tls-key"
        raise ValueError(msg)
    return None


def _auth(args: argparse.Namespace) -> AuthConfig | None:
    if args.auth_token_file is None and args.auth_jwks is None:
        return None
    return AuthConfig(
        tokens=_read_tokens(args.auth_token_file) if args.auth_token_file is not None else frozenset(),
        jwks_path=args.auth_jwks,
        jwt_audience=args.jwt_audience,
        jwt_issuer=args.jwt_issuer,
        health_needs_token=args.auth_health,
    )


def _read_tokens(path: Path) -> frozenset[str]:
    tokens = frozenset(
        line.strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    )
    if not tokens:
        raise ValueError(f"--auth-token-file {path}: no tokens in the file")
    return tokens


def _admission(args: argparse.Namespace) -> AdmissionConfig | None:
    if args.admission_queue_threshold_us is None:
        return None
    return AdmissionConfig(args.admission_queue_threshold_us, args.admission_window_secs)


def _follow_model_links(args: argparse.Namespace) -> bool:
    if args.refuse_model_links_outside and args.allow_model_links_outside:
        msg = "--refuse-model-links-outside and --allow-model-links-outside ask for opposite things: give one"
        raise ValueError(msg)
    return not args.refuse_model_links_outside
