"""The writer thread's half of a traffic record: many pending records (:mod:`.rows`) to one Arrow
table of the schema (:mod:`sonic.traffic.schema`), column by column in C, so the thread holds the GIL —
which the event loop needs — as briefly as it can: a few microseconds per request. Input signatures
repeat request after request: each distinct one is converted once and the rows take it by index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sonic.server.traffic.rows import PENDING_FIELDS, Pending
from sonic.traffic.schema import COLUMN_NAMES, arrow_schema
from sonic.traffic.signatures import Signatures

_AT = {name: index for index, name in enumerate(PENDING_FIELDS)}
# The recorder finds a record's model and contents where it finds a row's (sonic.traffic.writer).
assert _AT["model"] == COLUMN_NAMES.index("model")
assert PENDING_FIELDS[-1] == COLUMN_NAMES[-1] == "contents"
_NS_TO_US = {
    "queue_us": "queue_ns",
    "compute_input_us": "compute_input_ns",
    "compute_infer_us": "compute_infer_ns",
    "compute_output_us": "compute_output_ns",
    "total_us": "total_ns",
}


def _signature_columns(signatures: Sequence[Any]) -> dict[str, pa.Array]:
    index: dict[Any, int] = {}
    positions = [index.setdefault(signature, len(index)) for signature in signatures]
    unique = list(index)
    take = pa.array(positions, type=pa.int32())
    names = pa.array([[name for name, _, _ in s] for s in unique], type=pa.list_(pa.string()))
    datatypes = pa.array([[datatype for _, datatype, _ in s] for s in unique], type=pa.list_(pa.string()))
    shapes = pa.array(
        [[list(shape) for _, _, shape in s] for s in unique], type=pa.list_(pa.list_(pa.int64()))
    )
    return {
        "input_names": names.take(take),
        "input_datatypes": datatypes.take(take),
        "input_shapes": shapes.take(take),
    }


def pending_to_table(records: Sequence[Pending], signatures: Signatures | None = None) -> pa.Table:
    """``signatures``: where the records' signature numbers are (None: records carry the signatures)."""
    schema = arrow_schema()
    fields = list(zip(*records, strict=True))
    found = fields[_AT["signature"]]
    columns = _signature_columns(found if signatures is None else [signatures.resolve(s) for s in found])
    for field in schema:
        if field.name in columns:
            continue
        if field.name in _NS_TO_US:
            nanoseconds = pa.array(fields[_AT[_NS_TO_US[field.name]]], type=pa.int64())
            columns[field.name] = pc.divide(nanoseconds, 1000)
        elif field.name == "version":
            columns[field.name] = pa.array(map(str, fields[_AT["version"]]), type=pa.string())
        else:
            columns[field.name] = pa.array(fields[_AT[field.name]], type=field.type)
    return pa.Table.from_arrays([columns[field.name] for field in schema], schema=schema)
