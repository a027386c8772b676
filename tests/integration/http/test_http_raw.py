"""Triton's raw binary request over HTTP: ``Inference-Header-Content-Length: 0``, the body one input's data.

Raw ``http.client`` requests (no client library knows this form); the answers are Triton 2.51's, as
measured against it (tests/integration/differential compares them with a running Triton).
"""

from __future__ import annotations

import http.client
import json

import numpy as np
import pytest

from sonic.launch import ServerProcess

RAW = {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"}


def _post(address: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str | None, bytes]:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("Inference-Header-Content-Length"), response.read()
    finally:
        connection.close()


def _answer(header_length: str | None, body: bytes) -> tuple[dict[str, object], bytes]:
    if header_length is None:
        return json.loads(body), b""
    return json.loads(body[: int(header_length)]), body[int(header_length) :]


@pytest.mark.parametrize("path", ["/v2/models/identity/infer", "/v2/models/identity/versions/1/infer"])
@pytest.mark.parametrize("header", ["0", "00"])
def test_raw_request_is_the_one_input_with_a_batch_of_one(
    http_server: ServerProcess, path: str, header: str
) -> None:
    data = np.arange(16, dtype=np.float32).tobytes()
    status, length, body = _post(
        http_server.http_address, path, data, {**RAW, "Inference-Header-Content-Length": header}
    )
    assert status == 200, body
    head, tail = _answer(length, body)
    assert head == {
        "model_name": "identity",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
        ],
    }
    assert tail == data  # every output comes back as binary data


def test_raw_request_deduces_a_variable_dimension(http_server: ServerProcess) -> None:
    data = np.arange(5, dtype=np.float32).tobytes()
    status, length, body = _post(http_server.http_address, "/v2/models/variable_dims/infer", data, RAW)
    assert status == 200, body
    head, tail = _answer(length, body)
    assert head["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 5], "parameters": {"binary_data_size": 20}}
    ]
    assert tail == (2 * np.arange(5, dtype=np.float32)).tobytes()  # the model doubles its input


def test_raw_request_with_no_bytes_answers_plain_json(http_server: ServerProcess) -> None:
    # A -1 dimension of 0: the output has no bytes, and the answer has no Inference-Header-Content-Length.
    status, length, body = _post(http_server.http_address, "/v2/models/variable_dims/infer", b"", RAW)
    assert (status, length) == (200, None), body
    outputs = json.loads(body)["outputs"]
    assert outputs[0]["shape"] == [1, 0]
    assert outputs[0]["parameters"] == {"binary_data_size": 0}


@pytest.mark.parametrize(
    ("model", "body", "status", "message"),
    [
        (
            "add_sub",
            bytes(64),
            400,
            (
                "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'add_sub' model "
                "configuration"
            ),
        ),
        (
            "strings",
            b"text",
            400,
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            "identity",
            bytes(10),
            400,
            "input byte size mismatch for input 'raw_input' for model 'identity'. Expected 64, got 10",
        ),
        (
            "variable_dims",
            bytes(6),
            400,
            "input byte size mismatch for input 'raw_input' for model 'variable_dims'. Expected 4, got 6",
        ),
        ("no_such_model", bytes(4), 404, "Request for unknown model: 'no_such_model' is not found"),
    ],
)
def test_raw_request_errors_in_tritons_words(
    http_server: ServerProcess, model: str, body: bytes, status: int, message: str
) -> None:
    got, _, answer = _post(http_server.http_address, f"/v2/models/{model}/infer", body, RAW)
    assert got == status, answer
    assert message in json.loads(answer)["error"]


def test_empty_body_without_the_header_is_raw(http_server: ServerProcess) -> None:
    # As Triton 2.51: no header means "the JSON is the whole body", and a JSON of 0 bytes means raw.
    status, _, answer = _post(http_server.http_address, "/v2/models/identity/infer", b"", {})
    assert status == 400
    assert (
        "input byte size mismatch for input 'raw_input' for model 'identity'. Expected 64, got 0"
        in (json.loads(answer)["error"])
    )


def test_json_body_without_the_header_is_still_json(http_server: ServerProcess) -> None:
    # No header: the body is JSON (a raw body is then unparseable JSON, as on Triton).
    status, _, answer = _post(
        http_server.http_address, "/v2/models/identity/infer", np.zeros(16, np.float32).tobytes(), {}
    )
    assert status == 400
    assert "cannot be parsed" in json.loads(answer)["error"]
