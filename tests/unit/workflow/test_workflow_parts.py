"""Workflow pieces without servers: events, request splitting, CPU work, config, reports, tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.demos.common import compare_outputs, table
from sonic.workflow import (
    CpuWork,
    Event,
    InferenceConfig,
    InferenceMode,
    ModuleTiming,
    RunReport,
    SonicModule,
)
from sonic.workflow.report import EventRecord

pytestmark = pytest.mark.unit


class Echo(SonicModule):
    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        return {"a": event.get("a"), "b": event.get("b")}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        event.put("out", outputs)


def test_event_products_are_written_once() -> None:
    event = Event(4, {"hits": 1})
    event.put("tracks", 2)
    assert event.get("tracks") == 2
    assert "hits" in event
    assert event.names == ["hits", "tracks"]
    with pytest.raises(KeyError, match="event 4: product 'tracks' is already set"):
        event.put("tracks", 3)
    with pytest.raises(KeyError, match=r"no product 'jets'; present: \['hits', 'tracks'\]"):
        event.get("jets")


def test_split_into_requests_of_batch_size() -> None:
    module = Echo("m", batch_size=4)
    event = Event(0, {"a": np.arange(10), "b": np.arange(20).reshape(10, 2)})
    parts = module.split(module.acquire(event))
    assert [len(p["a"]) for p in parts] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([p["b"] for p in parts]), event.get("b"))
    assert len(Echo("m").split(module.acquire(event))) == 1
    with pytest.raises(ValueError, match="different row counts"):
        module.split({"a": np.arange(3), "b": np.arange(4)})
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        Echo("m", batch_size=0)


def test_cpu_work_is_deterministic_computation() -> None:
    work = CpuWork.calibrate(0.05)
    assert work.units_per_s > 0
    assert work.run(0.01, seed=1) == work.run(0.01, seed=1)
    assert work.run(0.0) == 0.0


def test_inference_config_from_env() -> None:
    config = InferenceConfig.from_env({"SONIC_INFERENCE": "direct", "SONIC_MODEL_REPOSITORY": "/a:/b"})
    assert config.mode is InferenceMode.DIRECT
    assert [str(p) for p in config.repositories] == ["/a", "/b"]
    service = InferenceConfig.from_env({"SONIC_SERVERS": "h:1,h:2"})
    assert service.mode is InferenceMode.SERVICE
    assert service.client.servers == ("h:1", "h:2")
    with pytest.raises(ValueError, match="direct inference needs at least one model repository"):
        InferenceConfig(mode=InferenceMode.DIRECT)
    with pytest.raises(ValueError, match="service inference needs at least one server"):
        InferenceConfig.from_env({})


def test_report_summary() -> None:
    events = tuple(
        EventRecord(i, i % 2, 0.0, 1.0, (ModuleTiming("m", wall_s=1.0, inference_s=0.5, requests=2),))
        for i in range(4)
    )
    report = RunReport("service", streams=2, wall_s=2.0, events=events)
    summary = report.summary()
    assert summary["events_per_s"] == 2.0
    assert summary["time_per_event_s"] == 1.0  # 2 streams x 2 s / 4 events
    assert summary["modules"]["m"]["requests"] == 2
    assert summary["modules"]["m"]["inference_s"] == 0.5


def test_compare_outputs_and_table() -> None:
    a = {"x": [np.array([1.0, 2.0])]}
    assert compare_outputs(a, {"x": [np.array([1.0, 2.0])]}) == {"identical": True, "max_abs_diff": 0.0}
    assert compare_outputs(a, {"x": [np.array([1.0, 2.5])]}) == {"identical": False, "max_abs_diff": 0.5}
    text = table(["name", "value"], [["a", 1.23456], ["bb", 2]])
    assert text.splitlines()[2] == "a     1.235"
