"""The traffic recording switched on and off through Triton's log-settings API (``traffic_log``), on both
protocols with tritonclient: the folder comes from ``--traffic-log`` only; off records nothing, and a
stop leaves every file closed and readable, also while requests keep coming."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository
from sonic.traffic.schema import PARTIAL_SUFFIX, read_traffic

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    repository = write_test_repository(
        tmp_path / "models", "sonic", tuple(m for m in MODELS if m.name == "identity")
    )
    args = ["--http-port", "0", "--traffic-log", str(tmp_path / "traffic"), "--traffic-log-start", "off"]
    with ServerProcess.start([repository], extra_args=args) as process:
        yield process


def _infer(client: grpcclient.InferenceServerClient, request_id: str) -> None:
    tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    client.infer("identity", [tensor], request_id=request_id)


def _switch(server: ServerProcess, protocol: str) -> Callable[[bool], dict[str, Any]]:
    """``traffic_log`` set through ``protocol``'s client; the settings answered, as plain values."""

    def switch(on: bool) -> dict[str, Any]:
        if protocol == "http":
            client = httpclient.InferenceServerClient(server.http_address)
            try:
                answer: dict[str, Any] = client.update_log_settings({"traffic_log": on})
            finally:
                client.close()
            return answer
        with grpcclient.InferenceServerClient(server.grpc_address) as grpc_client:
            settings = grpc_client.update_log_settings({"traffic_log": on}, as_json=True)["settings"]
        return {key: next(iter(value.values())) for key, value in settings.items()}

    return switch


def _complete(folder: Path) -> None:
    assert not list(folder.glob(f"*/*{PARTIAL_SUFFIX}"))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_off_records_nothing_on_records_and_off_closes_the_files(
    server: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    folder = tmp_path / "traffic"
    switch = _switch(server, protocol)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        _infer(client, "before")
        assert switch(False)["traffic_log"] is False  # GET-like: the key is there, recording is off
        assert read_traffic(folder).num_rows == 0
        assert switch(True)["traffic_log"] is True
        for n in range(3):
            _infer(client, f"on{n}")
        assert switch(False)["traffic_log"] is False
        _complete(folder)  # the stop returned: every file closed and renamed
        assert read_traffic(folder).column("request_id").to_pylist() == ["on0", "on1", "on2"]
        _infer(client, "off")
        switch(True)
        _infer(client, "again")
        switch(False)
    _complete(folder)
    assert read_traffic(folder).column("request_id").to_pylist() == ["on0", "on1", "on2", "again"]


def test_switching_under_load_keeps_files_whole(server: ServerProcess, tmp_path: Path) -> None:
    folder = tmp_path / "traffic"
    switch = _switch(server, "grpc")
    stop = threading.Event()
    sent: list[int] = [0, 0]
    failures: list[BaseException] = []

    def load(index: int) -> None:
        try:
            with grpcclient.InferenceServerClient(server.grpc_address) as client:
                while not stop.is_set():
                    _infer(client, f"c{index}")
                    sent[index] += 1
        except Exception as exc:  # noqa: BLE001  (reported by the test thread)
            failures.append(exc)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            for _ in range(5):
                switch(True)
                _infer(client, "mine")  # one request surely inside each recording
                switch(False)
                _complete(folder)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures
    table = read_traffic(folder)
    rows = table.num_rows
    assert table.column("request_id").to_pylist().count("mine") == 5
    assert rows <= sum(sent) + 5
    assert server.stop() == 0
    assert read_traffic(folder).num_rows == rows  # nothing recorded while off, to the end
