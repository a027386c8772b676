"""Model lifecycle through the manager itself: poll mode, several repositories, reloads."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.errors import ModelConfigError, NotFoundError
from sonic.protocol.types import InferRequest, InputTensor
from sonic.protocol.wire import ModelState
from sonic.server.backends.base import Backend
from sonic.server.config import ServerConfig
from sonic.server.metrics.stats import ModelStats
from sonic.server.models.entries import UNLOADED, ModelEntry, VersionState
from sonic.server.models.instance_thread import InstanceThread
from sonic.server.models.manager import ModelManager
from sonic.server.runtime.executor import ModelInstance
from sonic.server.runtime.policy import BatchPolicy
from sonic.server.runtime.scheduler import Scheduler
from sonic.server.work import WorkItem

pytestmark = pytest.mark.unit


def _identity(root: Path, name: str = "identity", versions: tuple[int, ...] = (1,)) -> Path:
    for version in versions:
        identity_model(root / name / str(version) / "model.onnx")
    (root / name / "config.pbtxt").write_text(IDENTITY_CONFIG.replace('name: "identity"', f'name: "{name}"'))
    return root / name


def _request(model: str, value: float) -> InferRequest:
    data = np.full((1, 16), value, dtype=np.float32)
    return InferRequest(model, "", [InputTensor("INPUT0", "FP32", (1, 16), raw=data.tobytes())])


async def test_poll_loads_new_reloads_changed_and_unloads_removed(tmp_path: Path) -> None:
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    await manager.poll()
    assert manager.loaded_models() == []
    _identity(tmp_path, "first")
    await manager.poll()
    assert manager.loaded_models() == ["first"]
    response = await manager.get("first").infer(_request("first", 3.0))
    np.testing.assert_array_equal(response.outputs[0].array, np.full((1, 16), 3.0, dtype=np.float32))
    identity_model(tmp_path / "first" / "2" / "model.onnx")  # a new version folder
    await manager.poll()
    assert manager.get("first").version == 2
    shutil.rmtree(tmp_path / "first")
    await manager.poll()
    assert manager.loaded_models() == []
    with pytest.raises(NotFoundError, match="has no available versions"):
        manager.get("first")
    await manager.close()


async def test_poll_does_not_retry_a_broken_model_until_it_changes(tmp_path: Path) -> None:
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    model_dir = _identity(tmp_path, "m")
    (model_dir / "config.pbtxt").write_text("max_batch_size: oops")
    await manager.poll()
    row = next(r for r in manager.index(ready_only=False) if r.name == "m")
    assert row.state is ModelState.UNAVAILABLE
    assert "config.pbtxt:1" in row.reason
    (model_dir / "config.pbtxt").write_text(IDENTITY_CONFIG.replace('"identity"', '"m"'))
    await manager.poll()
    assert manager.loaded_models() == ["m"]
    await manager.close()


async def test_several_repositories_and_name_conflicts(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _identity(first, "only_a")
    _identity(second, "only_b")
    _identity(first, "both")
    _identity(second, "both")
    manager = ModelManager(ServerConfig(model_repositories=(first, second)))
    await manager.load_all()
    assert sorted(manager.loaded_models()) == ["only_a", "only_b"]
    both = next(r for r in manager.index(ready_only=False) if r.name == "both")
    assert "more than one repository" in both.reason
    with pytest.raises(ModelConfigError, match="more than one repository"):
        await manager.load("both")
    with pytest.raises(NotFoundError):
        await manager.load("nowhere")
    await manager.close()


async def test_reload_keeps_serving_while_new_version_loads(tmp_path: Path) -> None:
    _identity(tmp_path, "m")
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    await manager.load("m")
    old = manager.get("m")
    reload = asyncio.create_task(manager.load("m"))
    response = await old.infer(_request("m", 1.0))  # the old version still answers during the reload
    await reload
    assert manager.get("m") is not old
    assert response.outputs[0].array.shape == (1, 16)
    await manager.close()


async def test_request_parameters_reach_the_work_item(tmp_path: Path) -> None:
    _identity(tmp_path, "m")
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    await manager.load("m")
    request = _request("m", 1.0)
    request.parameters = {"custom": "value", "sequence_id": 7}
    item = manager.get("m").prepare(request)
    assert item.parameters == {"custom": "value", "sequence_id": 7}
    item.future.cancel()
    await manager.close()


async def test_instance_group_runs_instances_concurrently() -> None:
    """Two instances: two requests execute at the same time (both held in execute together)."""
    barrier = threading.Barrier(2, timeout=10)
    met: list[str] = []  # the thread of each execution that passed the barrier

    class Meeting(Backend):
        name = "meeting"
        default_filename = "none"

        def execute(
            self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
        ) -> dict[str, npt.NDArray[Any]]:
            barrier.wait()  # only returns when both instances are inside execute at once
            met.append(threading.current_thread().name)
            return {"y": inputs["x"] * 3}

    instances = [ModelInstance(f"m_{i}", Meeting(), InstanceThread(f"t_{i}")) for i in range(2)]
    scheduler = Scheduler(
        model_name="m",
        policy=BatchPolicy(max_batch_size=4),
        instances=instances,
        output_names=["y"],
        stats=ModelStats(),
    )
    scheduler.start()
    loop = asyncio.get_running_loop()
    items = [
        WorkItem(inputs={"x": np.full((1, 2), i)}, batch_size=1, shape_key=(), future=loop.create_future())
        for i in range(2)
    ]
    results = await asyncio.wait_for(asyncio.gather(*(scheduler.submit(i) for i in items)), timeout=20)
    await scheduler.close(5)
    assert sorted(met) == ["t_0", "t_1"]  # each instance ran one request, both inside execute together
    for i, (outputs, _) in enumerate(results):
        np.testing.assert_array_equal(outputs["y"], np.full((1, 2), 3 * i))
    for instance in instances:
        instance.thread.shutdown()


def test_strict_readiness_counts_each_model_as_triton_does() -> None:
    """Every version READY or unloaded; a model with no version only once unloaded."""
    entry = ModelEntry("m")
    entry.reason = "failed to load 'm': bad config"
    assert not entry.counts_as_ready()
    entry.reason = UNLOADED
    assert entry.counts_as_ready()
    entry.versions = {1: VersionState(ModelState.READY), 2: VersionState(ModelState.UNAVAILABLE, UNLOADED)}
    assert entry.counts_as_ready()
    entry.versions[3] = VersionState(ModelState.UNAVAILABLE, "boom")
    assert not entry.counts_as_ready()
    entry.versions[3] = VersionState(ModelState.LOADING)
    assert not entry.counts_as_ready()
    assert entry.versions_and_reasons() == (
        "version 1 is READY; version 2 is UNAVAILABLE: unloaded; version 3 is LOADING"
    )
