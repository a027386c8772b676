"""The workflow framework end to end: direct vs service, stream overlap, errors, ROOT and Parquet."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.client.config import ClientConfig
from sonic.launch import ServerProcess
from sonic.workflow import (
    CpuModule,
    DirectInference,
    Event,
    Inference,
    InferenceConfig,
    InferenceMode,
    OutputCollector,
    Scheduler,
    SonicModule,
    SyntheticSource,
    open_inference,
)
from sonic.workflow.io import RootSource, write_parquet, write_root

pytestmark = pytest.mark.integration


class Features(CpuModule):
    """CPU module: derives the model inputs from the raw product."""

    def process(self, event: Event) -> None:
        raw = event.get("raw")
        event.put("x", np.tanh(raw).astype(np.float32))
        event.put("a", (raw[:4, :] * 10).astype(np.int32))


class Identity(SonicModule):
    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        return {"INPUT0": event.get("x")}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        event.put("y", outputs["OUTPUT0"])


class AddSub(SonicModule):
    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        a = event.get("a")
        return {"INPUT0": a, "INPUT1": np.ones_like(a)}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        event.put("sum", outputs["OUTPUT0"])


def raw_event(index: int, rng: np.random.Generator) -> dict[str, Any]:
    return {"raw": rng.standard_normal((12, 16)).astype(np.float32) + index}


def run_small(inference: Inference, out: Path) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    collector = OutputCollector(["y", "sum"])
    modules: list[CpuModule | SonicModule] = [
        Features(),
        Identity("identity", batch_size=5),
        AddSub("add_sub"),
        collector,
    ]
    report = Scheduler(modules, inference, streams=2).run(
        SyntheticSource(raw_event, 6, seed=3), server_models=["identity"]
    )
    report.write_json(out)
    return collector.columns(), json.loads(out.read_text())


def test_direct_and_service_give_identical_outputs(
    workflow_repository: Path, workflow_server: ServerProcess, tmp_path: Path
) -> None:
    direct_config = InferenceConfig(mode=InferenceMode.DIRECT, repositories=(workflow_repository,))
    service_config = InferenceConfig.from_env(
        {"SONIC_INFERENCE": "service", "SONIC_SERVERS": workflow_server.grpc_address}
    )
    with open_inference(direct_config) as direct:
        assert isinstance(direct, DirectInference)
        direct_columns, direct_json = run_small(direct, tmp_path / "direct.json")
    with open_inference(service_config) as service:
        service_columns, service_json = run_small(service, tmp_path / "service.json")
    assert direct_columns["event"] == service_columns["event"] == list(range(6))
    for name in ("y", "sum"):
        for left, right in zip(direct_columns[name], service_columns[name], strict=True):
            assert left.dtype == right.dtype
            np.testing.assert_array_equal(left, right)
    # The values are the models' answers, not just equal to each other.
    for index, (y, total) in enumerate(zip(direct_columns["y"], direct_columns["sum"], strict=True)):
        raw = raw_event(index, np.random.default_rng((3, index)))["raw"]
        np.testing.assert_array_equal(y, np.tanh(raw).astype(np.float32))
        np.testing.assert_array_equal(total, (raw[:4] * 10).astype(np.int32) + 1)
    for report, mode in ((direct_json, "direct"), (service_json, "service")):
        summary = report["summary"]
        assert summary["mode"] == mode
        assert summary["events"] == 6
        identity = summary["modules"]["identity"]
        assert identity["requests"] == 3  # 12 rows in requests of 5
        assert identity["bytes_sent"] == 12 * 16 * 4
        assert identity["inference_s"] > 0
        assert summary["server"]["identity"]["requests_per_event"] == 3
        assert summary["server"]["identity"]["compute_s"] > 0
        assert len(report["events"]) == 6
        assert {m["module"] for m in report["events"][0]["modules"]} == {
            "Features", "identity", "add_sub", "collector"
        }  # fmt: skip


class Delay(SonicModule):
    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        return {"INPUT0": np.full((1, 4), event.index, dtype=np.float32)}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        event.put("doubled", outputs["OUTPUT0"])


@pytest.mark.parametrize("mode", ["direct", "service"])
def test_streams_overlap_inference(
    mode: str, workflow_repository: Path, workflow_server: ServerProcess, delay_s: float
) -> None:
    """With inference taking a known time, 4 streams finish in about a quarter of the serial time."""
    if mode == "direct":
        config = InferenceConfig(mode=InferenceMode.DIRECT, repositories=(workflow_repository,))
    else:
        config = InferenceConfig(client=ClientConfig(servers=(workflow_server.grpc_address,)))
    events = 8
    with open_inference(config) as inference:
        inference.infer("delay", {"INPUT0": np.zeros((1, 4), np.float32)})  # load / connect first
        walls = {}
        for streams in (1, 4):
            collector = OutputCollector(["doubled"])
            scheduler = Scheduler([Delay("delay"), collector], inference, streams=streams)
            report = scheduler.run(SyntheticSource(lambda i, r: {}, events))
            walls[streams] = report.wall_s
            assert [float(v[0, 0]) for v in collector.columns()["doubled"]] == [
                2.0 * i for i in range(events)
            ]
            assert {r.stream for r in report.events} == set(range(streams))
    assert walls[1] >= events * delay_s * 0.95
    assert walls[4] < 0.6 * walls[1], walls


class Failing(CpuModule):
    def process(self, event: Event) -> None:
        if event.index == 2:
            raise RuntimeError(f"bad calibration in event {event.index}")


def test_a_failing_module_stops_the_run(workflow_repository: Path) -> None:
    with DirectInference([workflow_repository]) as direct:
        scheduler = Scheduler([Failing()], direct, streams=2)
        with pytest.raises(RuntimeError, match="bad calibration in event 2"):
            scheduler.run(SyntheticSource(lambda i, r: {}, 50))


def test_module_labels_must_be_unique(workflow_repository: Path) -> None:
    with DirectInference([workflow_repository]) as direct, pytest.raises(ValueError, match="unique"):
        Scheduler([Identity("identity"), Identity("identity")], direct)


def test_root_round_trip(workflow_repository: Path, tmp_path: Path) -> None:
    """Events written with uproot, read as a source, outputs written to ROOT and Parquet and read back."""
    uproot = pytest.importorskip("uproot")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(9)
    raw = [rng.standard_normal((int(n), 16)).astype(np.float32) for n in (3, 7, 1, 5)]
    source_file = write_root(tmp_path / "in.root", {"raw": raw, "run": [1, 1, 2, 2]})

    class Passthrough(SonicModule):
        def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
            return {"INPUT0": event.get("raw")}

        def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
            event.put("y", outputs["OUTPUT0"] * 2)

    collector = OutputCollector(["y", "run"])
    with DirectInference([workflow_repository]) as direct:
        Scheduler([Passthrough("identity"), collector], direct, streams=2).run(
            RootSource(source_file, step=3)
        )
    columns = collector.columns()
    assert columns["event"] == [0, 1, 2, 3]
    out_file = write_root(tmp_path / "out.root", columns)
    with uproot.open(str(out_file)) as handle:
        tree = handle["Events"]
        assert tree.num_entries == 4
        back = tree.arrays(["y", "y_shape", "run"], library="np")
    for index, original in enumerate(raw):
        restored = np.asarray(back["y"][index]).reshape(tuple(back["y_shape"][index]))
        np.testing.assert_array_equal(restored, original * 2)
    assert list(back["run"]) == [1, 1, 2, 2]
    # The output file is itself a source: shapes come back from the *_shape branches.
    again = list(RootSource(out_file, branches=("y",)))
    np.testing.assert_array_equal(again[1].get("y"), raw[1] * 2)
    table = pq.read_table(str(write_parquet(tmp_path / "out.parquet", columns)))
    assert table.column("run").to_pylist() == [1, 1, 2, 2]
    np.testing.assert_array_equal(
        np.asarray(table.column("y")[3].as_py(), dtype=np.float32).reshape(5, 16), raw[3] * 2
    )


def test_root_source_names_what_is_missing(tmp_path: Path) -> None:
    pytest.importorskip("uproot")
    path = write_root(tmp_path / "in.root", {"run": [1, 2]})
    with pytest.raises(KeyError, match=r"no branches \['hits'\]"):
        list(RootSource(path, branches=("hits",)))
    with pytest.raises(KeyError, match="no tree 'Other'"):
        list(RootSource(path, tree="Other"))
