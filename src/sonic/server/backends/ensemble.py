"""The ``ensemble`` platform's entry in the backend registry.

An ensemble is a scheduler, not a backend: :mod:`sonic.server.runtime.ensemble` runs it. This class
only gives the registry what every platform needs (no model file, a config check at load) and hands
the manager that scheduler instead of instances.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, ModelConfigError
from sonic.server.backends.base import Backend, InstanceContext
from sonic.server.runtime.ensemble import EnsemblePlan, EnsembleScheduler


class EnsembleBackend(Backend):
    name: ClassVar[str] = "ensemble"
    default_filename: ClassVar[str] = ""  # an ensemble has no model file

    @classmethod
    def auto_complete_config(cls, config: model_config_pb2.ModelConfig, model_path: Path) -> None:
        del model_path
        EnsemblePlan.from_config(config)  # refuse a broken graph at load time

    @classmethod
    def create_scheduler(cls, context: InstanceContext) -> EnsembleScheduler:
        if context.models is None:
            raise ModelConfigError(f"ensemble '{context.config.name}' needs a server to call its step models")
        return EnsembleScheduler(EnsemblePlan.from_config(context.config), context.models)

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        # Never reached: create_scheduler always answers, so the manager creates no instance.
        del inputs, output_names
        msg = "ensembles run through their EnsembleScheduler, not as instances"
        raise InternalError(msg)
