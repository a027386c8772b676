"""Envoy's optional filters for real: TLS at the listener and JWT bearer tokens, in front of a replica."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from sonic.client import ClientConfig, SyncClient
from sonic.client.config import TlsConfig
from sonic.client.errors import ClientError
from sonic.deploy.envoy_settings import EnvoySettings, JwtAuth, ListenerTls, Upstream
from sonic.deploy.local import RunningEnvoy, start_envoy
from sonic.launch import ServerProcess

from .conftest import self_signed

pytestmark = pytest.mark.integration
ISSUER = "https://tokens.example-site.org"
INPUTS = {"INPUT0": np.ones((1, 16), dtype=np.float32)}


@pytest.fixture
def secured(
    deploy_repository: Path, tmp_path: Path
) -> Iterator[tuple[RunningEnvoy, Path, ec.EllipticCurvePrivateKey]]:
    signing_key = ec.generate_private_key(ec.SECP256R1())
    public_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(signing_key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [public_jwk | {"kid": "site", "alg": "ES256", "use": "sig"}]}))
    cert, key = self_signed(tmp_path)
    with ServerProcess.start([deploy_repository]) as replica:
        settings = EnvoySettings(
            upstream=Upstream(addresses=(replica.grpc_address,)),
            listen_address="127.0.0.1",
            listen_port=0,
            admin_address="127.0.0.1",
            admin_port=0,
            jwt=JwtAuth(issuer=ISSUER, audiences=("sonic",), jwks_file=str(jwks)),
            tls=ListenerTls(str(cert), str(key)),
        )
        envoy = start_envoy(settings, tmp_path, concurrency=1, wait_timeout_s=60)
        try:
            yield envoy, cert, signing_key
        finally:
            envoy.stop()


def _token(key: ec.EllipticCurvePrivateKey, audience: str) -> str:
    claims = {"iss": ISSUER, "aud": audience, "exp": int(time.time()) + 600, "sub": "job-1"}
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": "site"})


def test_tls_and_a_valid_token_pass_a_missing_or_wrong_token_does_not(
    secured: tuple[RunningEnvoy, Path, ec.EllipticCurvePrivateKey],
) -> None:
    envoy, cert, key = secured
    tls = TlsConfig(root_certificates=cert)

    def config(token: str) -> ClientConfig:
        return ClientConfig(servers=(envoy.address,), tls=tls, token=token, allowed_tries=1)

    with SyncClient("identity", config(_token(key, "sonic"))) as client:
        np.testing.assert_array_equal(client.infer(INPUTS)["OUTPUT0"], INPUTS["INPUT0"])
    for token, reason in (("", "Jwt is missing"), (_token(key, "other"), "Audiences in Jwt are not allowed")):
        with pytest.raises(ClientError, match=reason), SyncClient("identity", config(token)) as client:
            client.infer(INPUTS)
