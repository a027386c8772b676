"""The backend interface: one class per framework, one object per model instance.

A backend object is created in a worker thread for each instance of each loaded model version and
then only ever called from that instance's own thread, so implementations need no locking.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.model_config import ModelSpec


@dataclass(frozen=True)
class InstanceContext:
    """Everything a backend instance is given at creation."""

    config: model_config_pb2.ModelConfig
    spec: ModelSpec
    version: int
    version_dir: Path
    model_path: Path  # version_dir / default_model_filename (may not exist for some backends)
    instance_name: str
    device_kind: str  # "cpu" or "gpu"
    device_id: int
    options: Mapping[str, str] = field(default_factory=dict)  # --backend-config NAME,KEY=VALUE entries

    def parameter(self, key: str) -> str | None:
        """A config ``parameters { key: ... string_value: ... }`` entry, else a backend option."""
        if key in self.config.parameters:
            return str(self.config.parameters[key].string_value)
        return self.options.get(key)


class Backend(ABC):
    """One model instance. Subclasses set ``name`` and ``default_filename``."""

    name: ClassVar[str]
    default_filename: ClassVar[str]

    @classmethod  # noqa: B027  (optional hook with a do-nothing default)
    def auto_complete_config(cls, config: model_config_pb2.ModelConfig, model_path: Path) -> None:
        """Fill inputs, outputs and ``max_batch_size`` from the model file where it carries them.

        The default does nothing: the config must then be complete.
        """

    @classmethod
    def convert_input(cls, model: str, name: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:  # noqa: ARG003
        """Per-request input conversion, run at validation time so a bad request fails alone.

        Runs on the event loop: keep it cheap. The default passes arrays through unchanged.
        """
        return array

    @abstractmethod
    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        """Run one (possibly merged) batch; called from the instance's own thread."""

    def close(self) -> None:  # noqa: B027
        """Release resources; called once, from the instance's own thread."""
