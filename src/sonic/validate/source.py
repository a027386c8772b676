"""The requests ``sonic validate`` sends: recorded ones, read lazily from a traffic folder.

Requests whose contents were sampled are sent with those bytes; with ``synthetic`` the others are too,
with seeded inputs of their recorded shapes and datatypes (:mod:`sonic.traffic.requests`, shared with
``sonic perf --replay``), so both targets get the same inputs on every run. Parquet files are read a
few rows at a time (:func:`sonic.traffic.schema.iter_traffic`): memory stays bounded whatever the
size of the trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sonic.protocol.types import ParameterValue
from sonic.traffic.requests import Synthetic, recorded_arrays, recorded_parameters
from sonic.traffic.schema import iter_traffic, traffic_files
from sonic.validate.compare import RequestInfo


@dataclass(frozen=True)
class SourceConfig:
    traffic_dir: Path
    models: tuple[str, ...] = ()  # empty: every recorded model
    synthetic: bool = False  # also the requests recorded without contents, with seeded inputs
    seed: int = 0
    max_requests: int = 0  # 0: all

    def __post_init__(self) -> None:
        if self.max_requests < 0:
            raise ValueError(f"--max-requests must be >= 0, got {self.max_requests}")


@dataclass(frozen=True)
class Recorded:
    """One request to send to both targets."""

    info: RequestInfo
    model: str
    arrays: dict[str, npt.NDArray[Any]]
    datatypes: dict[str, str]
    parameters: dict[str, ParameterValue]
    synthetic: bool  # its inputs are seeded, not recorded


def recorded_requests(config: SourceConfig) -> Iterator[Recorded]:
    """The requests, in recorded order (see :func:`~sonic.traffic.schema.iter_traffic`)."""
    rng = np.random.default_rng(config.seed)
    rows = iter_traffic(config.traffic_dir, config.models, with_contents_only=not config.synthetic)
    for index, row in enumerate(rows):
        if config.max_requests and index >= config.max_requests:
            return
        yield Recorded(
            info=RequestInfo(index, str(row["request_id"]), int(row["arrival_unix_ns"])),
            model=str(row["model"]),
            arrays=recorded_arrays(row, Synthetic.RANDOM, rng),
            datatypes=dict(zip(row["input_names"], row["input_datatypes"], strict=True)),
            parameters=recorded_parameters(row),
            synthetic=row["contents"] is None,
        )


def recorded_models(config: SourceConfig) -> list[str]:
    """The models the trace holds (only those selected)."""
    names = sorted({path.parent.name for path in traffic_files(config.traffic_dir)})
    return [name for name in names if not config.models or name in config.models]


def count_requests(config: SourceConfig) -> int:
    """How many requests the replay will send (for its progress bar): a pass over one column."""
    total = 0
    for path in traffic_files(config.traffic_dir):
        if config.models and path.parent.name not in config.models:
            continue
        file = pq.ParquetFile(path)
        if config.synthetic:
            total += file.metadata.num_rows
            continue
        for batch in file.iter_batches(batch_size=256, columns=["contents"]):
            total += pc.sum(pc.is_valid(batch.column(0))).as_py() or 0
    return min(total, config.max_requests) if config.max_requests else total
