"""``sonic serve`` security and frontend options become the right ServerConfig, and bad ones are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic.cli import serve
from sonic.cli.main import build_parser
from sonic.server.server import Server

pytestmark = pytest.mark.unit


def _config(tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
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
    assert config.http_port == 0
    assert config.metrics_port == 9
    assert not config.metrics_histograms
    assert config.tls is not None
    assert config.tls.client_ca_path == Path("ca.pem")
    assert config.auth is not None
    assert config.auth.tokens == frozenset({"alpha", "beta"})
    assert config.auth.health_needs_token
    assert config.admission is not None
    assert (config.admission.queue_threshold_us, config.admission.window_s) == (5000.0, 10.0)
    assert (config.max_requests_per_s, config.request_burst) == (50.0, 7)
    assert config.grpc_max_concurrent_streams == 8
    assert config.http_max_connections_per_client == 4
    assert not config.repository_control
    assert config.cache_size_bytes == 1024
    plain = _config(tmp_path)
    assert (plain.http_port, plain.metrics_port, plain.tls, plain.auth, plain.admission) == (None,) * 5
    assert plain.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--tls-cert", "c.pem"], "both --tls-cert and --tls-key"),
        (["--tls-client-ca", "ca.pem"], "needs --tls-cert"),
        (["--admission-queue-threshold-us", "-1"], "queue_threshold_us"),
        (["--max-requests-per-sec", "0"], "max_requests_per_s"),
        (["--cache-size-bytes", "-5"], "cache_size_bytes"),
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
