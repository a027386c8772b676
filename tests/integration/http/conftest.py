"""Servers with HTTP and metrics, TLS material, tokens and JWT key sets, all made in the test session."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from tests.integration.triton_helpers import SERVE_BROKEN_TOO

from sonic.launch import ServerProcess

TOKEN = "s3cret-token-for-tests"
HTTP_ARGS = ["--http-port", "0", "--metrics-port", "0"]


@pytest.fixture(scope="session")
def http_server(test_repository: Path, broken_repository: Path) -> Iterator[ServerProcess]:
    """gRPC + HTTP + metrics, explicit model control with every model loaded at start (the broken too)."""
    args = [*HTTP_ARGS, "--model-control-mode", "explicit", "--load-model", "*", *SERVE_BROKEN_TOO]
    with ServerProcess.start([test_repository, broken_repository], extra_args=args) as process:
        yield process


# --- Prometheus text ------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> tuple[Samples, dict[str, str]]:
    """Samples keyed by (name, labels), and the declared TYPE of each metric family."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(_LABEL.findall(match["labels"] or ""))
        samples[(match["name"], labels)] = float(match["value"])
    return samples, types


@pytest.fixture
def prometheus_parser() -> Callable[[str], tuple[Samples, dict[str, str]]]:
    return parse_metrics


@pytest.fixture
def scrape() -> Callable[[ServerProcess], Samples]:
    def run(process: ServerProcess) -> Samples:
        with urllib.request.urlopen(f"http://{process.metrics_address}/metrics", timeout=10) as response:
            return parse_metrics(response.read().decode())[0]

    return run


# --- TLS ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # a client certificate from a CA the server does not trust
    rogue_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        import ipaddress  # noqa: PLC0415

        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("sonic test CA", ca_key, "sonic test CA", ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    return Pki(
        ca=_write_cert(ca, root / "ca.pem"),
        server_cert=_write_cert(
            _issue("localhost", server_key, "sonic test CA", ca_key, server=True), root / "server.pem"
        ),
        server_key=_write_key(server_key, root / "server.key"),
        client_cert=_write_cert(_issue("client", client_key, "sonic test CA", ca_key), root / "client.pem"),
        client_key=_write_key(client_key, root / "client.key"),
        rogue_cert=_write_cert(_issue("rogue", rogue_key, "rogue CA", rogue_ca_key), root / "rogue.pem"),
        rogue_key=_write_key(rogue_key, root / "rogue.key"),
    )


# --- tokens ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "tokens.txt"
    path.write_text(f"# accepted tokens\n{TOKEN}\nanother-token\n")
    return path


@dataclass(frozen=True)
class JwtIssuer:
    jwks_path: Path
    mint: Callable[..., str]


@pytest.fixture(scope="session")
def jwt_issuer(tmp_path_factory: pytest.TempPathFactory) -> JwtIssuer:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "test-key", "alg": "RS256", "use": "sig"})
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))

    def mint(*, audience: str = "sonic", lifetime_s: float = 600.0, signing_key: object = key) -> str:
        claims = {"sub": "analysis-job", "aud": audience, "exp": int(time.time() + lifetime_s)}
        return jwt.encode(claims, signing_key, algorithm="RS256", headers={"kid": "test-key"})  # type: ignore[arg-type]

    return JwtIssuer(path, mint)
