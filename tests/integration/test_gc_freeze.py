"""``sonic serve`` freezes what start-up left alive (sonic.server.server.freeze_start_up); models loaded
later through the API must still be collected when unloaded: a load/unload loop leaves none of their
modules alive (a Python model's module is a reference cycle, freed only by the collector) and freezes
nothing more. A server started in a process of its own by ``sonic serve`` has its start-up frozen."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic.launch import ServerProcess
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.models.manager import ModelManager
from sonic.server.server import SERVING_GEN0_THRESHOLD, freeze_start_up

pytestmark = pytest.mark.integration

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.me = self  # a cycle of its own as well
        self.blob = bytearray(1 << 20)

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
"""


def _repository(root: Path) -> Path:
    for name in ("at_start", "later"):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name), encoding="utf-8")
        (root / name / "1" / "model.py").write_text(MODEL, encoding="utf-8")
    return root


def _module_of(model_file: Path) -> ModuleType:
    (module,) = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(model_file)]
    return module


async def test_models_loaded_after_the_freeze_are_collected_when_unloaded(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "models")
    config = ServerConfig(model_repositories=(repository,), model_control_mode=ModelControlMode.EXPLICIT)
    manager = ModelManager(config)
    thresholds = gc.get_threshold()
    try:
        await manager.load("at_start")
        freeze_start_up()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert gc.get_threshold() == (SERVING_GEN0_THRESHOLD, *thresholds[1:])
        gone: list[weakref.ref[ModuleType]] = []
        for _ in range(20):
            await manager.load("later")
            gone.append(weakref.ref(_module_of(repository / "later" / "1" / "model.py")))
            await manager.unload("later")
        gc.collect()
        # The last unload's backend may still be held for a moment by the executor thread that closed
        # it (its work item, until the thread takes the next one): every earlier one must be gone.
        assert [index for index, ref in enumerate(gone[:-1]) if ref() is not None] == []
        assert gc.get_freeze_count() <= frozen  # nothing loaded later was frozen (freed ones leave it)
    finally:
        await manager.close()
        gc.unfreeze()  # the test process's heap back as it was
        gc.set_threshold(*thresholds)


FREEZE_PROBE = """import gc

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        frozen = np.array([gc.get_freeze_count()], dtype=np.int64)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("FROZEN", frozen)]) for _ in requests]
"""
FREEZE_PROBE_CONFIG = """name: "freeze_probe"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "FROZEN" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""


def test_sonic_serve_freezes_its_start_up(tmp_path: Path) -> None:
    """The process ``sonic serve`` runs in has its start-up frozen (a model in it reads the count)."""
    model = tmp_path / "models" / "freeze_probe"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(FREEZE_PROBE_CONFIG, encoding="utf-8")
    (model / "1" / "model.py").write_text(FREEZE_PROBE, encoding="utf-8")
    with ServerProcess.start([tmp_path / "models"]) as server:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        try:
            tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
            tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
            result = client.infer("freeze_probe", [tensor])
        finally:
            client.close()
    frozen = result.as_numpy("FROZEN")
    assert frozen is not None
    assert int(frozen[0]) > 10_000  # the modules a server imports, at least
