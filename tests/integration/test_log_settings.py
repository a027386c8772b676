"""Triton's log-settings API on ``sonic serve``, through tritonclient on both protocols: the settings read
back as Triton 2.51 answers them, and a change acts on the server's log at once."""

from __future__ import annotations

import http.client
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

# Triton 2.51's answer to GET /v2/logging on a server started without --log-* flags (checked against it).
TRITON_DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO ", re.MULTILINE)


@pytest.fixture
def server(test_repository: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    repository = tmp_path / "models"
    shutil.copytree(test_repository / "identity", repository / "identity")
    with ServerProcess.start([repository], extra_args=["--http-port", "0"]) as process:
        yield process


def _grpc_settings(client: grpcclient.InferenceServerClient) -> dict[str, object]:
    answer = client.get_log_settings(as_json=True)
    assert isinstance(answer, dict)
    return {key: next(iter(value.values())) for key, value in answer["settings"].items()}


def test_both_protocols_read_tritons_defaults(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as grpc_client:
        grpc_settings = _grpc_settings(grpc_client)
    http_client = httpclient.InferenceServerClient(server.http_address)
    try:
        assert http_client.get_log_settings() == TRITON_DEFAULTS
        assert list(http_client.get_log_settings()) == list(TRITON_DEFAULTS)  # Triton's key order
    finally:
        http_client.close()
    assert grpc_settings == TRITON_DEFAULTS  # a oneof's value is written even when it is the default
    with grpcclient.InferenceServerClient(server.grpc_address) as grpc_client:
        metadata = grpc_client.get_server_metadata()
    assert "logging" in metadata.extensions


def test_verbose_level_shows_debug_records_and_log_info_hides_info(server: ServerProcess) -> None:
    http_client = httpclient.InferenceServerClient(server.http_address)
    try:
        http_client.update_log_settings({"log_warning": True})  # a change asked at level 0: no DEBUG line
        assert "log settings asked to change: 'log_warning'" not in server.log_path.read_text()
        answer = http_client.update_log_settings({"log_verbose_level": 2})
        assert answer == {**TRITON_DEFAULTS, "log_verbose_level": 2}
        with grpcclient.InferenceServerClient(server.grpc_address) as grpc_client:
            grpc_client.update_log_settings({"log_error": True})
            log = server.log_path.read_text()
            assert "log settings asked to change: 'log_error'" in log  # DEBUG, now shown
            assert "log settings changed: log_error=True" in log  # INFO
            grpc_client.update_log_settings({"log_info": False, "log_verbose_level": 0})
            grpc_client.update_log_settings({"log_error": False})
            assert _grpc_settings(grpc_client)["log_info"] is False
        log = server.log_path.read_text()
        assert "log_info=False" not in log  # said once INFO was already off: not logged
        assert "log_error=False" not in log
        assert http_client.get_log_settings() == {**TRITON_DEFAULTS, "log_info": False, "log_error": False}
    finally:
        http_client.close()


def test_log_format_iso8601_changes_the_time_stamps(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        assert not ISO_LINE.search(server.log_path.read_text())
        client.update_log_settings({"log_format": "ISO8601"})
        client.update_log_settings({"log_verbose_level": 0})
        assert _grpc_settings(client)["log_format"] == "ISO8601"
    assert ISO_LINE.search(server.log_path.read_text())


def test_the_log_file_is_never_set_through_the_api(server: ServerProcess, tmp_path: Path) -> None:
    target = tmp_path / "chosen.log"
    with (
        grpcclient.InferenceServerClient(server.grpc_address) as client,
        pytest.raises(InferenceServerException) as grpc_error,
    ):
        client.update_log_settings({"log_file": str(target)})
    assert grpc_error.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "log file location can not be updated through network protocol" in str(grpc_error.value)
    http_client = httpclient.InferenceServerClient(server.http_address)
    try:
        with pytest.raises(InferenceServerException) as http_error:
            http_client.update_log_settings({"log_file": str(target), "log_verbose_level": 3})
        assert http_error.value.status() == "501"
        assert http_client.get_log_settings() == TRITON_DEFAULTS  # nothing of a refused request changed
        with pytest.raises(InferenceServerException) as type_error:
            http_client.update_log_settings({"log_info": "yes"})
        assert type_error.value.status() == "400"
        assert "expect boolean for 'log_info', got str 'yes'" in str(type_error.value)
    finally:
        http_client.close()
    assert not target.exists()


def _post_logging(address: str, body: bytes) -> tuple[int, object]:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/v2/logging", body=body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize(
    "body", [b'{"log_file": null}', b'{"log_info": null}', b"[]", b"[1]", b'"x"', b"null"]
)
def test_nulls_and_bodies_that_are_no_object_change_nothing(server: ServerProcess, body: bytes) -> None:
    """Checked against Triton 2.51: a JSON null leaves its key (log_file too), any JSON value other than an
    object changes nothing; each answers 200 with the settings in force."""
    assert _post_logging(server.http_address, body) == (200, TRITON_DEFAULTS)
    status, _ = _post_logging(server.http_address, b'{"log_file": null, "log_verbose_level": 2}')
    assert status == 200
    assert _post_logging(server.http_address, b'{"log_file": ""}')[0] == 501  # any other value: refused


def test_traffic_log_is_refused_without_a_directory(server: ServerProcess) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc_address) as client,
        pytest.raises(InferenceServerException) as error,
    ):
        client.update_log_settings({"traffic_log": True})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "--traffic-log DIR" in str(error.value)
    http_client = httpclient.InferenceServerClient(server.http_address)
    try:
        with pytest.raises(InferenceServerException) as http_error:
            http_client.update_log_settings({"traffic_log": False})
        assert http_error.value.status() == "400"
        assert "--traffic-log DIR" in str(http_error.value)
        assert "traffic_log" not in http_client.get_log_settings()  # shown only with a folder
    finally:
        http_client.close()


def test_the_grpcio_front_end_serves_log_settings_too(test_repository: Path, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(test_repository / "identity", repository / "identity")
    with (
        ServerProcess.start([repository], extra_args=["--grpc-server", "grpcio"]) as process,
        grpcclient.InferenceServerClient(process.grpc_address) as client,
    ):
        client.update_log_settings({"log_verbose_level": 1})
        assert _grpc_settings(client) == {**TRITON_DEFAULTS, "log_verbose_level": 1}
        with pytest.raises(InferenceServerException) as error:
            client.update_log_settings({"log_file": "x.log"})
    assert error.value.status() == "StatusCode.UNIMPLEMENTED"
