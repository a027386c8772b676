"""The data plane the front-end fuzz tests send to: a real model manager with ``identity`` loaded, on one loop.

Both front-end fuzz modules (gRPC and HTTP/REST) build their front end on it; what they share (the
repository, the loaded model, the request buffer budget, the order of teardown) is written once here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.server.budget import RequestBudget
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.gate import CallGate
from sonic.server.models.manager import ModelManager


@dataclass(frozen=True)
class Plane:
    """What a front end is built on, and the loop (``runner``) every call of the test runs on."""

    dataplane: DataPlane
    gate: CallGate
    budget: RequestBudget
    runner: asyncio.Runner


@contextmanager
def identity_plane(
    root: Path,
    model_control_mode: ModelControlMode = ModelControlMode.NONE,
    config_text: str = IDENTITY_CONFIG,
) -> Iterator[Plane]:
    """``identity`` written under ``root`` (with ``config_text``) and loaded; the data plane accepting
    until the block ends."""
    identity_model(root / "identity" / "1" / "model.onnx")
    (root / "identity" / "config.pbtxt").write_text(config_text)
    config = ServerConfig(model_repositories=(root,), model_control_mode=model_control_mode)
    manager = ModelManager(config)
    dataplane = DataPlane(config, manager)
    with asyncio.Runner() as runner:
        runner.run(manager.load_all())
        dataplane.accepting = True
        budget = RequestBudget(config.budget.total_bytes, config.budget.wait_s)
        yield Plane(dataplane, CallGate(dataplane, None), budget, runner)
        dataplane.accepting = False
        dataplane.shared_memory.close()
        runner.run(manager.close())
