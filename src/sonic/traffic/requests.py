"""A recorded request as it is sent again: its input arrays and the parameters the server acts on.

Shared by ``sonic perf --replay`` (:mod:`sonic.perf.replay`) and ``sonic validate``
(:mod:`sonic.validate.source`). Recorded contents are the request's raw input bytes as the server
received them (BYTES as length-prefixed elements), so they decode back to the same arrays; a request
recorded without contents gets synthetic inputs of its recorded shapes and datatypes, from the
caller's seeded generator (``zero``: zeros; BYTES: eight-byte strings ``xxxxxxxx``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.types import ParameterValue


class Synthetic(enum.StrEnum):
    """What a request recorded without contents is sent with."""

    RANDOM = "random"
    ZERO = "zero"


def recorded_arrays(
    row: Mapping[str, Any], synthetic: Synthetic, rng: np.random.Generator, *, use_contents: bool = True
) -> dict[str, npt.NDArray[Any]]:
    """The inputs of a recorded request, by name: its recorded contents (where kept and ``use_contents``),
    else synthetic data of the recorded shapes."""
    contents = row["contents"] if use_contents else None
    arrays: dict[str, npt.NDArray[Any]] = {}
    for index, (name, datatype_name, recorded_shape) in enumerate(
        zip(row["input_names"], row["input_datatypes"], row["input_shapes"], strict=True)
    ):
        datatype = dtypes.from_name(datatype_name)
        shape = tuple(recorded_shape)
        if contents is not None:
            where = f"recorded input '{name}' of model '{row['model']}'"
            arrays[name] = dtypes.array_from_bytes(contents[index], datatype, shape, where)
        elif datatype.name == "BYTES":
            arrays[name] = np.full(shape, b"x" * 8, dtype=np.object_)
        elif synthetic is Synthetic.ZERO:
            arrays[name] = np.zeros(shape, dtype=datatype.numpy)
        elif datatype.name == "BOOL":
            arrays[name] = rng.random(shape) < 0.5
        elif datatype.numpy.kind in "iu":
            arrays[name] = rng.integers(0, 100, size=shape).astype(datatype.numpy)
        else:
            arrays[name] = rng.random(shape, dtype=np.float32).astype(datatype.numpy)
    return arrays


def recorded_parameters(row: Mapping[str, Any]) -> dict[str, ParameterValue]:
    """The recorded request parameters the server acts on: sequence id and flags, priority, timeout."""
    found: dict[str, ParameterValue] = {}
    if row["sequence_id"]:
        text = row["sequence_id"]
        found["sequence_id"] = int(text) if text.isdigit() else text
        found["sequence_start"] = bool(row["sequence_start"])
        found["sequence_end"] = bool(row["sequence_end"])
    if row["priority"]:
        found["priority"] = int(row["priority"])
    if row["timeout_us"]:
        found["timeout"] = int(row["timeout_us"])
    return found
