"""Workflow modules: plain CPU modules and SONIC modules (acquire / produce around an inference)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.workflow.event import Event

Arrays = dict[str, npt.NDArray[Any]]


class CpuModule(ABC):
    """A module that only computes on this CPU."""

    label: str = ""

    def __init__(self, label: str = "") -> None:
        self.label = label or type(self).__name__

    @abstractmethod
    def process(self, event: Event) -> None:
        """Read products from ``event`` and put new ones; called from the event's stream thread."""


class SonicModule(ABC):
    """An ML module: ``acquire`` makes the inputs of ``model``, ``produce`` takes its outputs.

    Between the two, the framework runs the inference (direct or as a service) while other streams
    use the CPU. With ``batch_size`` set, the inputs are sent as requests of at most that many rows
    (seed 002's 235 or 1693 patches per request), all in flight at once; their outputs are joined
    in order before ``produce``. ``outputs`` None asks for every output of the model.
    """

    def __init__(
        self,
        model: str,
        *,
        label: str = "",
        batch_size: int | None = None,
        outputs: Sequence[str] | None = None,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"module for model '{model}': batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.label = label or model
        self.batch_size = batch_size
        self.outputs = tuple(outputs) if outputs is not None else None

    @abstractmethod
    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        """The model's named inputs for this event (the CPU preprocessing)."""

    @abstractmethod
    def produce(self, event: Event, outputs: Arrays) -> None:
        """Put products made from the model's outputs into ``event``."""

    def split(self, inputs: Mapping[str, npt.NDArray[Any]]) -> list[Arrays]:
        """The requests for ``inputs``: one, or chunks of ``batch_size`` rows."""
        arrays = {name: np.asarray(value) for name, value in inputs.items()}
        if self.batch_size is None:
            return [arrays]
        rows = {name: a.shape[0] if a.ndim else 0 for name, a in arrays.items()}
        if len(set(rows.values())) != 1:
            raise ValueError(f"module '{self.label}': inputs have different row counts {rows}")
        total = next(iter(rows.values()))
        if total == 0:
            return [arrays]
        return [
            {name: a[start : start + self.batch_size] for name, a in arrays.items()}
            for start in range(0, total, self.batch_size)
        ]


class OutputCollector(CpuModule):
    """Keeps chosen products of every event, by event index, to write to ROOT or Parquet after the run."""

    def __init__(self, products: Sequence[str], label: str = "collector") -> None:
        super().__init__(label)
        self.products = tuple(products)
        self._rows: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def process(self, event: Event) -> None:
        row = {name: event.get(name) for name in self.products}
        with self._lock:
            self._rows[event.index] = row

    def rows(self) -> list[tuple[int, dict[str, Any]]]:
        """(event index, products) in event order."""
        with self._lock:
            return sorted(self._rows.items())

    def columns(self) -> dict[str, list[Any]]:
        """One list per product (plus ``event``), in event order: what the writers take."""
        rows = self.rows()
        columns: dict[str, list[Any]] = {"event": [index for index, _ in rows]}
        for name in self.products:
            columns[name] = [row[name] for _, row in rows]
        return columns
