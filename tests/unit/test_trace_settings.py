"""Triton's trace settings: global and per model, the API's changes and words, sampling and the trace files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from tritonclient.grpc import service_pb2

from sonic.protocol.errors import InvalidArgumentError, UnimplementedError
from sonic.server.trace.config import TraceConfig, TraceLevel
from sonic.server.trace.files import TraceFile, TraceWriter
from sonic.server.trace.requests import TraceManager
from sonic.server.trace.settings import CLEAR, Clear, TraceSettings, changes_from_grpc, changes_from_json

pytestmark = pytest.mark.unit

TIMESTAMPS = TraceLevel.TIMESTAMPS


def _settings(tmp_path: Path, **config: Any) -> TraceSettings:
    return TraceSettings(
        TraceConfig(**config), TraceFile(str(tmp_path / "t.json"), TraceWriter()), lambda: None
    )


def test_the_answer_is_tritons_strings_in_its_order(tmp_path: Path) -> None:
    settings = _settings(tmp_path, level=TIMESTAMPS, options=(("foo", "bar"),))
    answer = settings.of("").answer()
    assert answer == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": str(tmp_path / "t.json"),
        "trace_mode": "triton",
        "foo": "bar",
    }
    assert " ".join(answer) == "trace_level trace_rate trace_count log_frequency trace_file trace_mode foo"


def test_tracing_cannot_be_turned_on_without_a_file() -> None:
    settings = TraceSettings(TraceConfig(), TraceFile("", TraceWriter()), lambda: None)
    with pytest.raises(
        InvalidArgumentError, match=r"^Attempting to set invalid trace setting :trace file name is"
    ):
        settings.update("", {"level": TIMESTAMPS})
    settings.update("", {"rate": 0})  # an invalid setting that traces nothing is taken
    assert settings.of("").answer()["trace_rate"] == "0"


def test_a_models_setting_mirrors_the_global_one_until_cleared(tmp_path: Path) -> None:
    settings = _settings(tmp_path, level=TIMESTAMPS)
    settings.update("m", {"count": 3})
    assert settings.of("m").answer()["trace_count"] == "3"
    settings.update("", {"rate": 5})  # reaches the model's unspecified fields
    assert settings.of("m").answer()["trace_rate"] == "5"
    assert settings.of("m").answer()["trace_count"] == "3"
    settings.update("m", {"count": CLEAR})  # nothing of its own left: the global setting again
    assert "m" not in settings.models
    settings.update("", {"rate": CLEAR})  # the global one falls back on the command line's
    assert settings.of("").answer()["trace_rate"] == "1000"


def test_sampling_takes_every_nth_request_count_times(tmp_path: Path) -> None:
    setting = _settings(tmp_path, level=TIMESTAMPS, rate=2, count=2).of("")
    assert [setting.sample() for _ in range(8)] == [False, True, False, True, False, False, False, False]
    assert setting.answer()["trace_count"] == "0"  # the count left, as Triton answers it


def test_a_level_off_setting_samples_nothing(tmp_path: Path) -> None:
    setting = _settings(tmp_path, rate=1).of("")
    assert not any(setting.sample() for _ in range(3))


@pytest.mark.parametrize(
    ("payload", "error", "message"),
    [
        (
            {"trace_file": None},
            UnimplementedError,
            "trace file location can not be updated through network protocol",
        ),
        ({"trace_level": "TIMESTAMPS"}, InvalidArgumentError, "attempt to access JSON non-array as array"),
        ({"trace_level": [1]}, InvalidArgumentError, "attempt to access JSON non-string as string"),
        (
            {"trace_level": ["OFF", "TIMESTAMPS"]},
            InvalidArgumentError,
            "Expect only one trace level 'OFF' is",
        ),
        ({"trace_level": ["LOUD"]}, InvalidArgumentError, "unknown trace level 'LOUD'"),
        ({"trace_rate": 5}, InvalidArgumentError, "attempt to access JSON non-string as string"),
        ({"trace_rate": "abc"}, InvalidArgumentError, "Unable to parse 'trace_rate', got: abc"),
        (
            {"trace_rate": "99999999999"},
            InvalidArgumentError,
            r"Unable to parse 'trace_rate', value is out of range \[ 0, 4294967295 \], got: 99999999999",
        ),
        (
            {"trace_count": "-2"},
            InvalidArgumentError,
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-2$",
        ),
        ({"log_frequency": "x"}, InvalidArgumentError, "Unable to parse 'log_frequency', got: x"),
    ],
)
def test_http_changes_are_refused_in_tritons_words(
    payload: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match="^" + message):
        changes_from_json(payload)


def test_http_changes() -> None:
    changes = changes_from_json(
        {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "7", "trace_count": None, "other": 1}
    )
    assert changes == {"level": TIMESTAMPS | TraceLevel.TENSORS, "rate": 7, "count": CLEAR}
    assert changes_from_json({"trace_level": []}) == {}  # as Triton: an empty list changes nothing


def _grpc(**values: list[str]) -> Any:
    request = service_pb2.TraceSettingRequest()
    for key, strings in values.items():
        request.settings[key].value.extend(strings)
    return request.settings


def test_grpc_changes_and_words() -> None:
    assert changes_from_grpc(_grpc(trace_level=[], trace_rate=["3"])) == {"level": CLEAR, "rate": 3}
    with pytest.raises(InvalidArgumentError, match=r"^expect only 1 value for 'trace_rate'$"):
        changes_from_grpc(_grpc(trace_rate=["1", "2"]))
    with pytest.raises(InvalidArgumentError, match=r"Expecting value >= -1, got: -2$"):  # gRPC's has a space
        changes_from_grpc(_grpc(trace_count=["-2"]))
    with pytest.raises(UnimplementedError):
        changes_from_grpc(_grpc(trace_file=["x"]))


def _traced(manager: TraceManager, model: str = "m") -> None:
    trace = manager.begin(model, None)
    assert trace is not None
    trace.started(model, 1, "")
    trace.stamp("REQUEST_END")
    trace.finish()


def _objects(path: Path) -> list[dict[str, Any]]:
    loaded = json.loads(path.read_text())
    assert isinstance(loaded, list)
    return loaded


def test_log_frequency_numbers_the_files_and_the_rest_is_written_at_close(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    manager = TraceManager(TraceConfig(level=TIMESTAMPS, rate=1, log_frequency=2, file=str(file)))
    manager.start_writer()
    for _ in range(5):
        _traced(manager)
    manager.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.0", "t.json.1", "t.json.2"]
    assert {o["id"] for o in _objects(tmp_path / "t.json.0")} == {1, 2}
    assert {o["id"] for o in _objects(tmp_path / "t.json.2")} == {5}


def test_without_log_frequency_one_file_grows_and_closes(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    manager = TraceManager(TraceConfig(level=TIMESTAMPS, rate=2, file=str(file)))
    manager.start_writer()
    for _ in range(6):
        manager_trace = manager.begin("m", None)
        if manager_trace is not None:
            manager_trace.started("m", 1, "r")
            manager_trace.finish()
    manager.close()
    objects = _objects(file)
    assert [o["id"] for o in objects if "model_name" in o] == [1, 2, 3]
    assert objects[0] == {"id": 1, "model_name": "m", "model_version": 1, "request_id": "r"}


def test_a_count_ends_in_a_numbered_file_as_in_triton(tmp_path: Path) -> None:
    manager = TraceManager(TraceConfig(level=TIMESTAMPS, rate=1, count=2, file=str(tmp_path / "t.json")))
    manager.start_writer()
    for _ in range(2):
        _traced(manager)
    assert manager.begin("m", None) is None  # the count is spent
    manager.close()
    assert [p.name for p in tmp_path.iterdir()] == ["t.json.0"]


def test_the_writer_drops_past_its_bound(tmp_path: Path) -> None:
    writer = TraceWriter(max_pending_bytes=0)
    writer.start()
    writer.submit(str(tmp_path / "x"), "{}", whole=True)
    writer.close()
    assert writer.dropped == 1
    assert not (tmp_path / "x").exists()


def _active_after(manager: TraceManager, *levels: TraceLevel | Clear) -> list[bool]:
    active = []
    for level in levels:
        manager.update("m", {"level": level})
        active.append(manager.active)
    return active


def test_the_active_flag_follows_the_settings(tmp_path: Path) -> None:
    manager = TraceManager(TraceConfig(file=str(tmp_path / "t.json")))
    assert [manager.active, *_active_after(manager, TIMESTAMPS, CLEAR)] == [False, True, False]


@pytest.mark.parametrize(
    ("array", "datatype", "data"),
    [
        (np.array([[1.0, 2.5, 1e-7, 1234567.0]], np.float32), "FP32", "1,2.5,1e-07,1.23457e+06"),
        (np.array([True, False]), "BOOL", "1,0"),
        (np.array([-3, 250], np.int64), "INT64", "-3,250"),
        (np.array([1.5], np.float16), "FP16", ""),  # as Triton: FP16 data is not written
        (np.array([b'a"b', b"c"], dtype=object), "BYTES", '"a\\"b","c"'),
    ],
)
def test_tensor_data_as_tritons_trace_writes_it(
    tmp_path: Path, array: npt.NDArray[Any], datatype: str, data: str
) -> None:
    file = tmp_path / "t.json"
    manager = TraceManager(TraceConfig(level=TraceLevel.TENSORS, rate=1, file=str(file)))
    manager.start_writer()
    trace = manager.begin("m", None)
    assert trace is not None
    trace.started("m", 1, "")
    trace.queued({"X": array}, {"X": datatype})
    trace.finish()
    manager.close()
    [written] = _objects(file)  # level TENSORS alone: the tensor, nothing else
    assert written["tensor"] == {
        "name": "X",
        "data": data,
        "shape": ",".join(map(str, array.shape)),
        "dtype": datatype,
    }
