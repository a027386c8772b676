"""``h2``, the stack's name, selects it wherever ``native`` does (both stay accepted)."""

from __future__ import annotations

import argparse

import pytest

from sonic.cli.serve_security import add_security_arguments, security_from_args
from sonic.client.config import TransportKind
from sonic.server.config import GrpcServerKind


@pytest.mark.parametrize("value", ["native", "h2"])
def test_the_server_and_the_client_take_either_name(value: str) -> None:
    assert GrpcServerKind(value) is GrpcServerKind.NATIVE
    assert TransportKind(value) is TransportKind.NATIVE


@pytest.mark.parametrize("value", ["native", "h2"])
def test_sonic_serve_takes_either_name(value: str) -> None:
    parser = argparse.ArgumentParser()
    add_security_arguments(parser)
    args = parser.parse_args(["--grpc-server", value])
    assert security_from_args(args)["grpc_server"] is GrpcServerKind.NATIVE


def test_other_names_are_still_refused() -> None:
    with pytest.raises(ValueError, match="'http2' is not a valid GrpcServerKind"):
        GrpcServerKind("http2")
    with pytest.raises(ValueError, match="'http2' is not a valid TransportKind"):
        TransportKind("http2")
