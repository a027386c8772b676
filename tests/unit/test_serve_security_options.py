"""``sonic serve``'s option groups (gRPC, HTTP, metrics, budget, security) become the right ServerConfig, and bad
ones are refused."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from sonic.cli import serve
from sonic.cli.main import build_parser
from sonic.cli.serve_budget import add_budget_arguments, budget_config_from_args
from sonic.cli.serve_grpc import add_grpc_arguments, grpc_config_from_args
from sonic.cli.serve_http import (
    add_http_arguments,
    add_metrics_arguments,
    http_config_from_args,
    metrics_config_from_args,
)
from sonic.cli.serve_security import add_security_arguments, security_config_from_args
from sonic.server.config import (
    BudgetConfig,
    GrpcConfig,
    HttpConfig,
    MetricsConfig,
    SecurityConfig,
    ServerConfig,
)
from sonic.server.server import Server

pytestmark = pytest.mark.unit


def _config(tmp_path: Path, *extra: str) -> ServerConfig:
    args = build_parser().parse_args(["serve", "--model-repository", str(tmp_path), "--gpus", "0", *extra])
    return serve.config_from_args(args)


def test_options_reach_the_config(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\nalpha\n\nbeta\n")
    config = _config(
        tmp_path,
        "--http-port", "0", "--metrics-port", "9", "--no-metrics-histograms",
        "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem",
        "--auth-token-file", str(tokens), "--auth-health",
        "--admission-queue-threshold-us", "5000", "--admission-window-secs", "10",
        "--max-requests-per-sec", "50", "--request-burst", "7", "--grpc-max-concurrent-streams", "8",
        "--http-max-connections-per-client", "4", "--disable-repository-control", "--cache-size-bytes", "1024",
    )  # fmt: skip
    assert config.http.port == 0
    assert config.metrics.port == 9
    assert not config.metrics.histograms
    security = config.security
    assert security.tls is not None
    assert security.tls.client_ca_path == Path("ca.pem")
    assert security.auth is not None
    assert security.auth.tokens == frozenset({"alpha", "beta"})
    assert security.auth.health_needs_token
    assert security.admission is not None
    assert (security.admission.queue_threshold_us, security.admission.window_s) == (5000.0, 10.0)
    assert (security.max_requests_per_s, security.request_burst) == (50.0, 7)
    assert config.grpc.max_concurrent_streams == 8
    assert config.http.max_connections_per_client == 4
    assert not security.repository_control
    assert config.cache_size_bytes == 1024
    plain = _config(tmp_path)
    assert (plain.http.port, plain.metrics.port) == (None, None)
    assert (plain.security.tls, plain.security.auth, plain.security.admission) == (None, None, None)
    assert plain.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--tls-cert", "c.pem"], "both --tls-cert and --tls-key"),
        (["--tls-client-ca", "ca.pem"], "needs --tls-cert"),
        (["--admission-queue-threshold-us", "-1"], "queue_threshold_us"),
        (["--max-requests-per-sec", "0"], "max_requests_per_s"),
        (["--cache-size-bytes", "-5"], "cache_size_bytes"),
        (["--request-buffer-budget-mb", "0"], "--request-buffer-budget-mb must be at least 1, got 0"),
        (["--request-buffer-wait-secs", "0"], "wait_s > 0"),
    ],
)
def test_bad_options(tmp_path: Path, extra: list[str], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        _config(tmp_path, *extra)


def test_empty_token_file_and_bad_key_set(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no tokens"):
        _config(tmp_path, "--auth-token-file", str(empty))
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": 5}')
    with pytest.raises(ValueError, match="not a usable JSON Web Key Set"):
        Server(_config(tmp_path, "--auth-jwks", str(jwks)))


def test_the_command_line_defaults_are_the_library_defaults(tmp_path: Path) -> None:
    """``sonic serve`` with no options runs what ``ServerConfig`` describes by default, group by group."""
    assert _config(tmp_path) == ServerConfig(model_repositories=(tmp_path,))


@pytest.mark.parametrize(
    ("add_arguments", "build", "default"),
    [
        (add_grpc_arguments, grpc_config_from_args, GrpcConfig()),
        (add_http_arguments, http_config_from_args, HttpConfig()),
        (add_metrics_arguments, metrics_config_from_args, MetricsConfig()),
        (add_budget_arguments, budget_config_from_args, BudgetConfig()),
        (add_security_arguments, security_config_from_args, SecurityConfig()),
    ],
)
def test_each_option_group_stands_alone(
    add_arguments: Callable[[argparse.ArgumentParser], None],
    build: Callable[[argparse.Namespace], object],
    default: object,
) -> None:
    """One argparse group and one builder per configuration group: neither reads another group's options."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert len(parser._action_groups) == 3  # argparse's two and its own
    assert build(parser.parse_args([])) == default
