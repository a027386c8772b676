"""Units of the guard (tokens, rate limit) and of the HTTP body codec."""

from __future__ import annotations

import json
import time

import jwt
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from tritonclient.grpc import service_pb2

from sonic.protocol.errors import InvalidArgumentError, ResourceExhaustedError, UnauthenticatedError
from sonic.protocol.http_json import decode_infer_request, encode_infer_response, message_to_json
from sonic.protocol.types import InferResponse, OutputTensor
from sonic.server.config import AuthConfig
from sonic.server.frontends.gate import peer_host
from sonic.server.guard import RateLimiter, TokenVerifier

pytestmark = pytest.mark.unit


def test_static_tokens() -> None:
    verifier = TokenVerifier(AuthConfig(tokens=frozenset({"alpha", "beta"})))
    verifier.verify("Bearer alpha")
    verifier.verify("bearer beta")
    for header in (None, "", "alpha", "Basic alpha", "Bearer ", "Bearer alph", "Bearer alphaa"):
        with pytest.raises(UnauthenticatedError):
            verifier.verify(header)


def test_jwt_with_local_key_set(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "alg": "ES256"})
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    now = [time.time()]
    verifier = TokenVerifier(
        AuthConfig(jwks_path=path, jwt_audience="sonic", jwt_issuer="site"), clock=lambda: now[0]
    )

    def token(**claims: object) -> str:
        body = {"aud": "sonic", "iss": "site", "exp": int(time.time()) + 60} | claims
        return jwt.encode(body, key, algorithm="ES256", headers={"kid": "k1"})

    good = token()
    verifier.verify(f"Bearer {good}")
    verifier.verify(f"Bearer {good}")  # the cached verification answers the same
    for bad in (
        token(aud="other"),
        token(iss="elsewhere"),
        token(exp=int(time.time()) - 10),
        good[:-4] + "AAAA",
    ):
        with pytest.raises(UnauthenticatedError):
            verifier.verify(f"Bearer {bad}")
    now[0] += 120  # past the cached token's expiry: it is refused again
    with pytest.raises(UnauthenticatedError):
        verifier.verify(f"Bearer {good}")


def test_rate_limiter_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(2.0, 3, clock=lambda: now[0])
    for _ in range(3):
        limiter.take("10.0.0.1")
    with pytest.raises(ResourceExhaustedError, match=r"10\.0\.0\.1"):
        limiter.take("10.0.0.1")
    limiter.take("10.0.0.2")  # buckets are per address
    now[0] += 0.5  # one token back at 2/s
    limiter.take("10.0.0.1")
    with pytest.raises(ResourceExhaustedError):
        limiter.take("10.0.0.1")


def test_peer_host() -> None:
    assert peer_host("ipv4:127.0.0.1:50512") == "127.0.0.1"
    assert peer_host("ipv6:%5B::1%5D:50512") == "::1"
    assert peer_host("unix:/tmp/socket") == "unix:/tmp/socket"


def _binary_body(header: dict[str, object], *tensors: bytes) -> tuple[bytes, int]:
    head = json.dumps(header).encode()
    return head + b"".join(tensors), len(head)


def test_decode_binary_inputs_are_views() -> None:
    a = np.arange(4, dtype=np.float32)
    header: dict[str, object] = {
        "id": "r7",
        "parameters": {"binary_data_output": True, "priority": 2},
        "inputs": [
            {"name": "A", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
            {"name": "B", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]},
        ],
        "outputs": [{"name": "Y", "parameters": {"binary_data": False}}, {"name": "Z"}],
    }
    body, length = _binary_body(header, a.tobytes())
    request, choice = decode_infer_request(body, length, "m", "")
    assert request.request_id == "r7"
    assert request.priority == 2
    assert isinstance(request.inputs[0].raw, memoryview)
    assert request.inputs[0].raw.obj is body  # a slice of the received body, not a copy
    assert request.inputs[1].array is not None
    assert request.inputs[1].array.tolist() == [[1, 2], [3, 4]]
    assert request.outputs == ["Y", "Z"]
    assert not choice.is_binary("Y")
    assert choice.is_binary("Z")


@pytest.mark.parametrize(
    ("header", "tail", "length_delta", "fragment"),
    [
        ({"inputs": [{"name": "A", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]},
         b"\0" * 8, 0, "runs past the end"),
        ({"inputs": [{"name": "A", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}, b"\0" * 3, 0, "left over"),
        ({"inputs": [{"name": "A", "shape": "2", "datatype": "FP32", "data": [1, 2]}]}, b"", 0, "'shape'"),
        ({"inputs": [{"name": "A", "shape": [2], "datatype": "FP32"}]}, b"", 0, "But no field is set"),
        ({"inputs": [{"name": "A", "shape": [3], "datatype": "FP32", "data": [1, 2]}]}, b"", 0, "expected 3"),
        ({"inputs": [{"name": "T", "shape": [1], "datatype": "BYTES", "data": ["a", "b"]}]}, b"", 0,
         "unexpected number of string elements 2 for inference input 'T' for model 'm', expecting 1"),
        ({"inputs": []}, b"", 10_000, "Inference-Header-Content-Length"),
        ({"outputs": []}, b"", 0, "no 'inputs'"),
        ({"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": -1}}]}, b"", 0,
         "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": 1, "shared_memory_region": "r"}}]},
         b"", 0, "Output can't set both 'shared_memory_region' and 'classification'"),
    ],
)  # fmt: skip
def test_decode_errors(header: dict[str, object], tail: bytes, length_delta: int, fragment: str) -> None:
    body, length = _binary_body(header, tail)
    with pytest.raises(InvalidArgumentError, match=fragment):
        decode_infer_request(body, length + length_delta, "m", "")


NON_NUMBER = "Unable to parse 'data': attempt to access JSON non-number as double"
NON_SIGNED = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
NON_UNSIGNED = "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"


@pytest.mark.parametrize(
    ("datatype", "data", "words", "element"),
    [
        ("FP32", [1.0, None], NON_NUMBER, "element 1 of the FP32 input is null"),
        ("FP64", [None], NON_NUMBER, "element 0 of the FP64 input is null"),
        ("FP16", ["x"], NON_NUMBER, 'element 0 of the FP16 input is "x"'),
        ("FP32", [[1.0], [True]], NON_NUMBER, "element 1 of the FP32 input is true"),
        ("BOOL", [True, None], "attempt to access JSON non-boolean as boolean", "element 1 of the BOOL input is null"),
        ("BOOL", [1], "attempt to access JSON non-boolean as boolean", "element 0 of the BOOL input is 1"),
        ("INT32", [1, None], NON_SIGNED, "element 1 of the INT32 input is null"),
        ("INT64", [1.5], NON_SIGNED, "element 0 of the INT64 input is 1.5"),
        ("INT8", [True], NON_SIGNED, "element 0 of the INT8 input is true"),
        ("UINT32", [None], NON_UNSIGNED, "element 0 of the UINT32 input is null"),
        ("UINT64", [2, -1], NON_UNSIGNED, "element 1 of the UINT64 input is -1"),
        ("BYTES", [None], "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
         "BYTES element 0 is NoneType"),
    ],
)  # fmt: skip
def test_json_data_of_the_wrong_json_type_is_refused_in_tritons_words(
    datatype: str, data: list[object], words: str, element: str
) -> None:
    """null is not NaN nor false: Triton refuses it (and true for a number, 1 for BOOL, 1.5 for INT)."""
    shape = [len(data), 1] if isinstance(data[0], list) else [len(data)]
    header: dict[str, object] = {
        "inputs": [{"name": "A", "shape": shape, "datatype": datatype, "data": data}]
    }
    body, length = _binary_body(header, b"")
    with pytest.raises(InvalidArgumentError) as info:
        decode_infer_request(body, length, "m", "")
    assert words in str(info.value)
    assert element in str(info.value)


@pytest.mark.parametrize(
    ("datatype", "data"),
    [
        ("FP32", [1, 2.5]),
        ("FP64", [[1], [2]]),
        ("BOOL", [True, False]),
        ("INT32", [-3, 4]),
        ("UINT8", [0, 255]),
    ],
)
def test_json_data_of_the_right_json_type_is_taken(datatype: str, data: list[object]) -> None:
    shape = [len(data), 1] if isinstance(data[0], list) else [len(data)]
    header: dict[str, object] = {
        "inputs": [{"name": "A", "shape": shape, "datatype": datatype, "data": data}]
    }
    body, length = _binary_body(header, b"")
    request, _ = decode_infer_request(body, length, "m", "")
    array = request.inputs[0].array
    assert array is not None
    assert array.reshape(-1).tolist() == np.asarray(data).reshape(-1).tolist()


def test_encode_mixed_outputs() -> None:
    response = InferResponse(
        "m",
        "1",
        "r1",
        [
            OutputTensor("Y", "FP32", (2,), np.array([1.5, 2.5], np.float32)),
            OutputTensor("S", "BYTES", (1,), np.array([b"muon"], dtype=np.object_)),
        ],
    )
    from sonic.protocol.http_json import OutputChoice  # noqa: PLC0415

    body, length = encode_infer_response(response, OutputChoice(False, {"Y": True}))
    assert length is not None
    header = json.loads(body[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 8}
    assert header["outputs"][1]["data"] == ["muon"]
    assert np.frombuffer(body[length:], np.float32).tolist() == [1.5, 2.5]
    body, length = encode_infer_response(response, OutputChoice(False, {}))
    assert length is None
    assert json.loads(body)["outputs"][0]["data"] == [1.5, 2.5]


def test_message_to_json_keeps_numbers_and_zeros() -> None:
    message = service_pb2.ModelMetadataResponse(name="m", versions=["1"])
    message.inputs.add(name="X", datatype="FP32", shape=[-1, 16])
    out = message_to_json(message)
    assert out["inputs"][0]["shape"] == [-1, 16]
    stats = service_pb2.ModelStatistics(name="m", version="1")
    stats.inference_stats.success.count = 0
    assert message_to_json(stats)["inference_stats"]["success"] == {"count": 0, "ns": 0}
    assert message_to_json(stats)["execution_count"] == 0


def test_statistics_json_always_has_response_stats_in_tritons_shape() -> None:
    # Triton 2.51's statistics JSON writes "response_stats": {} for every model whose backend reports no
    # per-response statistics (all of sonic's); a filled map is keyed by the response index.
    response = service_pb2.ModelStatisticsResponse()
    stats = response.model_stats.add(name="m", version="1")
    assert message_to_json(response)["model_stats"][0]["response_stats"] == {}
    stats.response_stats["0"].success.count = 2
    stats.response_stats["0"].success.ns = 7
    assert message_to_json(stats)["response_stats"] == {"0": {"success": {"count": 2, "ns": 7}}}
    # the maps of other messages' JSON stay left out when empty, as before
    assert "parameters" not in message_to_json(service_pb2.ModelInferResponse(model_name="m"))
