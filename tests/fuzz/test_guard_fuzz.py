"""Fuzzing the first thing a server reads from a client when authentication is on: the
``authorization`` header, static bearer tokens and JWTs checked against a local key set.

Header values reach the verifier as text: aiohttp decodes HTTP header bytes as UTF-8 with
``surrogateescape`` (so bytes that are not UTF-8 become lone surrogates), the native gRPC front end as
latin-1. The cases are valid headers (a static token, signed JWTs with and without ``kid``, claims
present or not) changed character by character, those surrogates included.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from sonic.protocol.errors import UnauthenticatedError
from sonic.server.config import AuthConfig
from sonic.server.guard import TokenVerifier
from sonic.testing.fuzz import mutated, one_in, run_bounded

PEAK_BYTES = 1 << 20
KEY = ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory) -> TokenVerifier:
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key()))
    jwk.update({"kid": "k1", "alg": "ES256"})
    path: Path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return TokenVerifier(
        AuthConfig(tokens=frozenset({"alpha"}), jwks_path=path, jwt_audience="sonic", jwt_issuer="site")
    )


claim_values = st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.text(max_size=6) | st.floats()


@st.composite
def jwts(draw: st.DrawFn) -> str:
    claims: dict[str, object] = {"aud": "sonic", "iss": "site", "exp": int(time.time()) + 60}
    for key in draw(st.lists(st.sampled_from(["aud", "iss", "exp", "nbf", "iat"]), max_size=2)):
        claims[key] = draw(claim_values)
    headers: dict[str, object] = {"kid": draw(st.sampled_from(["k1", "k2"]) | st.text(max_size=4))}
    if draw(one_in(4)):
        headers = {}
    # Signed as JWS over any JSON: PyJWT's JWT encoder would refuse the odd claims the verifier must refuse.
    token = jwt.PyJWS().encode(json.dumps(claims).encode(), KEY, algorithm="ES256", headers=headers)
    if draw(one_in(4)):  # a header that is valid base64 of any JSON (a "kid" of any type)
        header = json.dumps(
            draw(st.dictionaries(st.sampled_from(["alg", "kid", "typ"]), claim_values))
        ).encode()
        token = base64.urlsafe_b64encode(header).rstrip(b"=").decode() + token[token.index(".") :]
    return token


@st.composite
def authorizations(draw: st.DrawFn) -> str | None:
    token = draw(st.sampled_from(["alpha", ""]) | jwts())
    value = draw(st.sampled_from(["Bearer ", "bearer ", "Basic ", ""])) + token
    if draw(one_in(2)):
        # Byte-level changes, read back as aiohttp reads header bytes.
        value = draw(mutated(value.encode())).decode("utf-8", errors="surrogateescape")
    return draw(st.just(value) | st.none()) if draw(one_in(20)) else value


@given(authorizations())
def test_bearer_tokens_and_jwts(verifier: TokenVerifier, authorization: str | None) -> None:
    """A header is accepted or refused with UNAUTHENTICATED, never an error of its own (a 500 with a
    logged traceback per request, for a client that has not even authenticated)."""
    run_bounded(
        lambda: verifier.verify(authorization), allowed=(UnauthenticatedError,), max_peak_bytes=PEAK_BYTES
    )
