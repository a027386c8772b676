"""sonic.client over mutual TLS with a bearer token, against a server that requires both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sonic.client import SyncClient
from sonic.client.config import ClientConfig, TlsConfig, TransportKind
from sonic.client.errors import ClientError, RetriesExhaustedError
from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-tests"  # listed in the token_file fixture
BOTH_TRANSPORTS = pytest.mark.parametrize("transport", list(TransportKind))


@pytest.fixture(scope="module")
def secure_server(test_repository: Path, pki, token_file: Path) -> Iterator[ServerProcess]:  # type: ignore[no-untyped-def]
    args = [
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
    ]
    args += ["--auth-token-file", str(token_file)]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        yield process


def _config(server: ServerProcess, pki, token: str, transport: TransportKind) -> ClientConfig:  # type: ignore[no-untyped-def]
    tls = TlsConfig(root_certificates=pki.ca, private_key=pki.client_key, certificate_chain=pki.client_cert)
    return ClientConfig(
        servers=(server.grpc_address,),
        tls=tls,
        token=token,
        allowed_tries=2,
        retry_backoff_s=0.01,
        transport=transport,
    )


@BOTH_TRANSPORTS
def test_client_with_mutual_tls_and_token(  # type: ignore[no-untyped-def]
    secure_server: ServerProcess, pki, transport: TransportKind
) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with SyncClient("add_sub", _config(secure_server, pki, TOKEN, transport)) as client:
        out = client.infer({"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(out["OUTPUT0"], a * 2)


@BOTH_TRANSPORTS
def test_client_with_a_wrong_token_is_refused_and_not_retried(  # type: ignore[no-untyped-def]
    secure_server: ServerProcess, pki, transport: TransportKind
) -> None:
    a = np.ones((1, 16), dtype=np.int32)
    with (
        pytest.raises(ClientError) as info,
        SyncClient("add_sub", _config(secure_server, pki, "wrong", transport)) as client,
    ):
        client.infer({"INPUT0": a, "INPUT1": a})
    assert not isinstance(info.value, RetriesExhaustedError)  # an authentication failure is not transient
    assert "UNAUTHENTICATED" in str(info.value) or "token" in str(info.value).lower()
