"""``h2`` names our stack everywhere (the default); ``native``, its old name, is still accepted, with a note."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from sonic.cli.perf import add_parser, config_from_args
from sonic.cli.serve_grpc import add_grpc_arguments, grpc_config_from_args
from sonic.client.config import ClientConfig, TransportKind
from sonic.server.config import GrpcServerKind


@pytest.mark.parametrize("value", ["native", "h2"])
def test_the_server_and_the_client_take_either_name(value: str) -> None:
    assert GrpcServerKind(value) is GrpcServerKind.H2
    assert TransportKind(value) is TransportKind.H2


@pytest.mark.parametrize("value", ["native", "h2"])
def test_sonic_serve_takes_either_name(value: str) -> None:
    parser = argparse.ArgumentParser()
    add_grpc_arguments(parser)
    args = parser.parse_args(["--grpc-server", value])
    assert grpc_config_from_args(args).server is GrpcServerKind.H2


def test_other_names_are_still_refused() -> None:
    with pytest.raises(ValueError, match="'http2' is not a valid GrpcServerKind"):
        GrpcServerKind("http2")
    with pytest.raises(ValueError, match="'http2' is not a valid TransportKind"):
        TransportKind("http2")


def test_h2_is_the_default_name() -> None:
    assert ClientConfig().transport is TransportKind.H2
    assert GrpcServerKind.H2.value == TransportKind.H2.value == "h2"
    parser = argparse.ArgumentParser()
    add_grpc_arguments(parser)
    assert grpc_config_from_args(parser.parse_args([])).server is GrpcServerKind.H2


def test_the_old_name_is_noted_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert GrpcServerKind("h2") is GrpcServerKind.H2
        assert TransportKind("h2") is TransportKind.H2
    assert caplog.messages == []
    with caplog.at_level(logging.WARNING):
        GrpcServerKind("native")
        TransportKind("native")
    assert len(caplog.messages) == 2
    assert all(message.startswith("'native' is the old name of 'h2'") for message in caplog.messages)


def test_client_config_takes_the_old_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "client.toml"
    path.write_text('servers = ["localhost:8001"]\ntransport = "native"\n')
    with caplog.at_level(logging.WARNING):
        assert ClientConfig.from_toml(path).transport is TransportKind.H2
        assert ClientConfig.from_env({"SONIC_TRANSPORT": "native"}).transport is TransportKind.H2
    assert caplog.messages == ["'native' is the old name of 'h2' (transport = \"h2\")"] * 2


@pytest.mark.parametrize(
    ("given", "expected"),
    [([], "h2"), (["--transport", "native"], "h2"), (["--transport", "grpcio"], "grpcio")],
)
def test_sonic_perf_takes_the_old_name(given: list[str], expected: str) -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["perf", "-m", "identity", *given])
    assert config_from_args(args).transport == expected
