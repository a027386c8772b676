"""TLS and mutual TLS, bearer tokens (static and JWT) on every call that needs one, limits, path checks."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http.aio as aiohttpclient
from cryptography.hazmat.primitives.asymmetric import rsa
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-tests"


def _http(
    address: str,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: str | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, str]:
    scheme = "https" if context is not None else "http"
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"{scheme}://{address}{path}", data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _add_sub_inputs(module) -> list[object]:  # type: ignore[no-untyped-def]
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(tensor)
    return inputs


# --- TLS ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mtls_server(test_repository: Path, pki) -> Iterator[ServerProcess]:  # type: ignore[no-untyped-def]
    args = ["--http-port", "0", "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    args += ["--tls-client-ca", str(pki.ca)]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        yield process


def _client_context(pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:  # type: ignore[no-untyped-def]
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def test_mtls_http(mtls_server: ServerProcess, pki) -> None:  # type: ignore[no-untyped-def]
    good = _client_context(pki, pki.client_cert, pki.client_key)
    assert _http(mtls_server.http_address, "GET", "/v2/health/ready", context=good)[0] == 200

    async def infer() -> npt.NDArray[Any]:
        async with aiohttpclient.InferenceServerClient(
            mtls_server.http_address, ssl=True, ssl_context=good
        ) as c:
            return (await c.infer("add_sub", _add_sub_inputs(aiohttpclient))).as_numpy("OUTPUT0")  # type: ignore[no-any-return]

    np.testing.assert_array_equal(asyncio.run(infer()), np.full((1, 16), 2, np.int32))
    for refused in (_client_context(pki), _client_context(pki, pki.rogue_cert, pki.rogue_key)):
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _http(mtls_server.http_address, "GET", "/v2/health/ready", context=refused)
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plaintext to a TLS port
        _http(mtls_server.http_address, "GET", "/v2/health/ready")


def test_mtls_grpc(mtls_server: ServerProcess, pki) -> None:  # type: ignore[no-untyped-def]
    good = grpcclient.InferenceServerClient(
        mtls_server.grpc_address,
        ssl=True,
        root_certificates=str(pki.ca),
        private_key=str(pki.client_key),
        certificate_chain=str(pki.client_cert),
    )
    try:
        assert good.is_server_ready()
        result = good.infer("add_sub", _add_sub_inputs(grpcclient))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2, np.int32))
    finally:
        good.close()
    for kwargs in (
        {"ssl": True, "root_certificates": str(pki.ca)},  # no client certificate
        {"ssl": True, "root_certificates": str(pki.ca), "private_key": str(pki.rogue_key),
         "certificate_chain": str(pki.rogue_cert)},
        {},  # plaintext
    ):  # fmt: skip
        client = grpcclient.InferenceServerClient(mtls_server.grpc_address, **kwargs)
        try:
            with pytest.raises(InferenceServerException) as info:
                client.get_server_metadata(client_timeout=5)
            assert info.value.status() in {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"}
        finally:
            client.close()


def test_tls_without_client_certificates(test_repository: Path, pki) -> None:  # type: ignore[no-untyped-def]
    args = ["--http-port", "0", "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        assert _http(process.http_address, "GET", "/v2/health/live", context=_client_context(pki))[0] == 200
        client = grpcclient.InferenceServerClient(
            process.grpc_address, ssl=True, root_certificates=str(pki.ca)
        )
        try:
            assert client.get_server_metadata().name == "triton"
            # 4 MiB: DATA frames of up to 1 MiB read through TLS straight into the message's buffer.
            array = np.random.default_rng(0).random((16, 1 << 16), dtype=np.float32)
            tensor = grpcclient.InferInput("INPUT0", list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            result = client.infer("variable_dims", [tensor]).as_numpy("OUTPUT0")
            assert result is not None
            np.testing.assert_array_equal(result, 2 * array)  # the model doubles its input
        finally:
            client.close()


# --- tokens ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_sample_repository(tmp_path_factory.mktemp("auth-repo"))
    outside = write_sample_repository(tmp_path_factory.mktemp("outside"))
    (root / "escapee").symlink_to(outside / "add_sub", target_is_directory=True)
    return root


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def auth_server(  # type: ignore[no-untyped-def]
    request: pytest.FixtureRequest, auth_repository: Path, token_file: Path, jwt_issuer
) -> Iterator[ServerProcess]:
    """Once per gRPC stack: both take their checks from the one call gate."""
    args = [
        "--grpc-server",
        request.param,
        "--http-port",
        "0",
        "--auth-token-file",
        str(token_file),
        "--auth-jwks",
        str(jwt_issuer.jwks_path),
    ]
    args += ["--jwt-audience", "sonic", "--model-control-mode", "explicit", "--load-model", "*"]
    # The strict mode: the repository's link out ("escapee") is refused, not followed as by default;
    # the server serves the other models and says ready.
    args += ["--refuse-model-links-outside", "--exit-on-error=false", "--strict-readiness=false"]
    with ServerProcess.start([auth_repository], extra_args=args) as process:
        yield process


INFER_BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": [1] * 16} for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()

PROTECTED_HTTP = [
    ("GET", "/v2", None),
    ("GET", "/v2/models/add_sub", None),
    ("GET", "/v2/models/add_sub/versions/1", None),
    ("GET", "/v2/models/add_sub/config", None),
    ("GET", "/v2/models/add_sub/stats", None),
    ("GET", "/v2/models/stats", None),
    ("POST", "/v2/models/add_sub/infer", INFER_BODY),
    ("POST", "/v2/repository/index", b"{}"),
    ("POST", "/v2/repository/models/identity/load", b"{}"),
    ("POST", "/v2/repository/models/identity/unload", b"{}"),
    ("GET", "/v2/systemsharedmemory/status", None),
    ("POST", "/v2/systemsharedmemory/unregister", b"{}"),
    ("GET", "/v2/logging", None),  # who may change the server's log is an operator (docs/security.md)
    ("POST", "/v2/logging", b'{"log_verbose_level": 0}'),
]


def test_http_endpoints_need_a_token(auth_server: ServerProcess, jwt_issuer) -> None:  # type: ignore[no-untyped-def]
    address = auth_server.http_address
    for method, path in (
        ("GET", "/v2/health/live"),
        ("GET", "/v2/health/ready"),
        ("GET", "/v2/models/add_sub/ready"),
    ):
        assert _http(address, method, path)[0] == 200, path  # probes stay open by default
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = [None, "wrong-token", jwt_issuer.mint(audience="other"), jwt_issuer.mint(lifetime_s=-60),
               jwt_issuer.mint(signing_key=other_key)]  # fmt: skip
    for method, path, body in PROTECTED_HTTP:
        for token in refused:
            status, text = _http(address, method, path, body, token=token)
            assert status == 401, (method, path, token, status, text)
            assert "authentication" in json.loads(text)["error"]
        for token in (TOKEN, "another-token", jwt_issuer.mint()):
            status, text = _http(address, method, path, body, token=token)
            assert status == 200, (method, path, status, text)
    assert _http(address, "GET", "/v2/models/identity", token=TOKEN)[0] == 404  # the last call unloaded it
    assert _http(address, "POST", "/v2/repository/models/identity/load", b"{}", token=TOKEN)[0] == 200


def test_grpc_calls_need_a_token(auth_server: ServerProcess, jwt_issuer: Any) -> None:
    client = grpcclient.InferenceServerClient(auth_server.grpc_address)
    calls: list[Callable[[dict[str, str]], object]] = [
        lambda h: client.get_server_metadata(headers=h),
        lambda h: client.get_model_metadata("add_sub", headers=h),
        lambda h: client.get_model_config("add_sub", headers=h),
        lambda h: client.get_inference_statistics("add_sub", headers=h),
        lambda h: client.get_model_repository_index(headers=h),
        lambda h: client.load_model("identity", headers=h),
        lambda h: client.unload_model("identity", headers=h),
        lambda h: client.load_model("identity", headers=h),
        lambda h: client.infer("add_sub", _add_sub_inputs(grpcclient), headers=h),
        lambda h: client.get_system_shared_memory_status(headers=h),
        lambda h: client.unregister_system_shared_memory(headers=h),
        lambda h: client.get_log_settings(headers=h),
        lambda h: client.update_log_settings({"log_verbose_level": 0}, headers=h),
    ]
    try:
        assert client.is_server_live()
        assert client.is_model_ready("add_sub")
        for call in calls:
            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
                with pytest.raises(InferenceServerException) as info:
                    call(headers)
                assert info.value.status() == "StatusCode.UNAUTHENTICATED", info.value
            for token in (TOKEN, jwt_issuer.mint()):
                call({"authorization": f"Bearer {token}"})
    finally:
        client.close()
    channel = grpc.insecure_channel(auth_server.grpc_address)
    try:  # the streaming call is checked once, when the stream opens
        stream = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as rpc_info:
            list(stream(iter([b""]), timeout=10))
        assert rpc_info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()


def test_load_refuses_paths_outside_the_repository(auth_server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(auth_server.grpc_address)
    headers = {"authorization": f"Bearer {TOKEN}"}
    try:
        for name, status in (("escapee", "INVALID_ARGUMENT"), ("../add_sub", "INVALID_ARGUMENT"),
                             ("add_sub/../../etc", "INVALID_ARGUMENT"), ("/etc", "INVALID_ARGUMENT")):  # fmt: skip
            with pytest.raises(InferenceServerException) as info:
                client.load_model(name, headers=headers)
            assert info.value.status() == f"StatusCode.{status}", (name, info.value)
        with pytest.raises(InferenceServerException, match="outside the model repositories"):
            client.load_model("escapee", headers=headers)
    finally:
        client.close()
    for path in ("/v2/repository/models/..%2F..%2Fetc/load", "/v2/repository/models/escapee/load"):
        assert _http(auth_server.http_address, "POST", path, b"{}", token=TOKEN)[0] == 400, path


# --- limits ---------------------------------------------------------------------------------------------


def test_repository_control_disabled_and_rate_limit(test_repository: Path) -> None:
    args = ["--http-port", "0", "--model-control-mode", "explicit", "--load-model", "add_sub"]
    args += ["--disable-repository-control", "--max-requests-per-sec", "0.01", "--request-burst", "4"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        client = grpcclient.InferenceServerClient(process.grpc_address)
        try:
            with pytest.raises(InferenceServerException) as info:
                client.load_model("identity")
            assert info.value.status() == "StatusCode.PERMISSION_DENIED"
            assert "disabled" in info.value.message()
            status, _ = _http(process.http_address, "POST", "/v2/repository/models/add_sub/unload", b"{}")
            assert status == 403
            client.get_server_metadata()  # third and fourth calls of the burst
            assert client.is_server_ready()  # health probes are not counted
            assert _http(process.http_address, "GET", "/v2")[0] == 200
            with pytest.raises(InferenceServerException) as info:
                client.get_server_metadata()
            assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert _http(process.http_address, "GET", "/v2")[0] == 429
            assert _http(process.http_address, "GET", "/v2/health/ready")[0] == 200
        finally:
            client.close()


def test_http_connections_per_client(test_repository: Path) -> None:
    args = ["--http-port", "0", "--http-max-connections-per-client", "2"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        host, port = process.http_address.rsplit(":", 1)
        connections = [http.client.HTTPConnection(host, int(port), timeout=10) for _ in range(3)]
        try:
            statuses = []
            for connection in connections:
                connection.request("GET", "/v2")
                response = connection.getresponse()
                body = response.read()
                statuses.append(response.status)
            assert statuses == [200, 200, 429]
            assert "concurrent HTTP connections" in json.loads(body)["error"]
            connections[0].request("GET", "/v2")  # admitted connections keep working
            assert connections[0].getresponse().status == 200
        finally:
            for connection in connections:
                connection.close()
