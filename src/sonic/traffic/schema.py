"""The traffic record: one row per inference request, in Parquet files, one folder per model.

``DIR/<model>/traffic-<opened>-<pid>-<n>.parquet``; a file is written as ``.parquet.partial`` and renamed
when complete, so readers see only whole files. The schema version is in each file's metadata
(``sonic.traffic.schema``). Times are integers: ``arrival_unix_ns`` the wall clock when the server
received the request, durations in microseconds. Tensor contents are kept only for sampled requests.
A decoupled model's request is one row too, written when its stream ends, with the number of responses
it carried. Files of schema version 1 (before that column) read as version 2.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SCHEMA_VERSION = "2"  # 2: the responses column, for decoupled models' requests (1: without it)
READABLE_VERSIONS = ("1", "2")
METADATA_KEY = b"sonic.traffic.schema"
SUFFIX = ".parquet"
PARTIAL_SUFFIX = ".parquet.partial"


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # pyarrow type, by name (see _arrow_type)
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column(
        "arrival_unix_ns", "int64", "wall-clock time the server received the request (ns since the epoch)"
    ),
    Column("model", "string", "model name"),
    Column("version", "string", "model version that served it"),
    Column("request_id", "string", "the request's id, as the client sent it (may be empty)"),
    Column("status", "string", "OK, or the gRPC status name of the error it got"),
    Column("batch_size", "int32", "the request's own batch size (1 for a model without batching)"),
    Column("input_names", "list<string>", "inputs, in request order"),
    Column("input_datatypes", "list<string>", "their datatypes (FP32, BYTES, ...)"),
    Column("input_shapes", "list<list<int64>>", "their shapes"),
    Column("input_bytes", "int64", "bytes of all inputs"),
    Column("output_bytes", "int64", "bytes of all outputs returned (0 on error)"),
    Column("sequence_id", "string", "sequence correlation id (integers as text; empty: none)"),
    Column("sequence_start", "bool", "sequence start flag"),
    Column("sequence_end", "bool", "sequence end flag"),
    Column("priority", "int64", "priority parameter (0: the model's default)"),
    Column("timeout_us", "int64", "timeout parameter in microseconds (0: the model's default)"),
    Column("queue_us", "int64", "time in the scheduler's queue"),
    Column("compute_input_us", "int64", "merging inputs into the batch"),
    Column("compute_infer_us", "int64", "the model's execution"),
    Column("compute_output_us", "int64", "splitting outputs from the batch"),
    Column("total_us", "int64", "receipt to answer, inside the server"),
    Column("executed_batch_id", "int64", "which execution it joined (per model version; 0: unknown)"),
    Column("executed_batch_size", "int32", "batch size of that execution (its requests' sizes summed)"),
    Column(
        "responses",
        "int32",
        "responses sent: a decoupled model's stream may carry 0 or more; others 1 (0 on error)",
    ),
    Column("contents", "list<binary>", "raw input bytes in input order, for sampled requests; else null"),
)
COLUMN_NAMES = tuple(column.name for column in COLUMNS)


def _arrow_type(name: str) -> pa.DataType:
    simple = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string(), "bool": pa.bool_()}
    nested = {
        "list<string>": pa.list_(pa.string()),
        "list<list<int64>>": pa.list_(pa.list_(pa.int64())),
        "list<binary>": pa.list_(pa.binary()),
    }
    return simple.get(name) or nested[name]


def arrow_schema() -> pa.Schema:
    fields = [pa.field(column.name, _arrow_type(column.type)) for column in COLUMNS]
    return pa.schema(fields, metadata={METADATA_KEY: SCHEMA_VERSION.encode()})


def _upgraded(table: pa.Table) -> pa.Table:
    """A table of an earlier schema version as the current one: version 1 recorded no decoupled model's
    request, so each of its requests had one response, or none when it failed."""
    if "responses" not in table.column_names:
        ok = pc.equal(table.column("status"), "OK")
        responses = pc.cast(ok, pa.int32())
        table = table.add_column(table.column_names.index("contents"), "responses", responses)
    return table.select(list(COLUMN_NAMES)).cast(arrow_schema())


def traffic_files(directory: Path) -> Iterator[Path]:
    """The complete traffic files under ``directory`` (every model), oldest name first."""
    yield from sorted(directory.glob(f"*/*{SUFFIX}"), key=lambda p: (p.parent.name, p.name))


def _check_version(path: Path, schema: pa.Schema) -> None:
    version = (schema.metadata or {}).get(METADATA_KEY)
    if version not in {v.encode() for v in READABLE_VERSIONS}:
        raise ValueError(
            f"{path}: traffic schema {version!r}, this sonic reads {', '.join(READABLE_VERSIONS)}"
        )


def read_traffic(directory: Path, models: tuple[str, ...] = ()) -> pa.Table:
    """Every complete record under ``directory`` (only ``models`` when given), sorted by arrival."""
    tables: list[pa.Table] = []
    for path in traffic_files(directory):
        if models and path.parent.name not in models:
            continue
        table = pq.read_table(path)
        _check_version(path, table.schema)
        tables.append(_upgraded(table))
    if not tables:
        return arrow_schema().empty_table()
    return pa.concat_tables(tables).sort_by("arrival_unix_ns")


def _file_rows(path: Path, batch_rows: int, with_contents_only: bool) -> Iterator[dict[str, Any]]:
    file = pq.ParquetFile(path)
    _check_version(path, file.schema_arrow)
    for batch in file.iter_batches(batch_size=batch_rows):
        table = pa.Table.from_batches([batch])
        if with_contents_only:
            table = table.filter(pc.is_valid(table.column("contents")))
        yield from _upgraded(table.replace_schema_metadata(file.schema_arrow.metadata)).to_pylist()


def iter_traffic(
    directory: Path, models: tuple[str, ...] = (), *, batch_rows: int = 64, with_contents_only: bool = False
) -> Iterator[dict[str, Any]]:
    """The records under ``directory`` one at a time, read lazily: at most ``batch_rows`` rows of each
    model's current file are in memory, whatever the size of the trace.

    Models are merged by arrival; one model's records come in the order its files hold them (the
    order its requests finished, which may put one a little before an earlier arrival).
    ``with_contents_only`` skips the records that kept no contents without building them.
    """
    by_model: dict[str, list[Path]] = {}
    for path in traffic_files(directory):
        if not models or path.parent.name in models:
            by_model.setdefault(path.parent.name, []).append(path)
    streams = [
        itertools.chain.from_iterable(_file_rows(path, batch_rows, with_contents_only) for path in paths)
        for paths in by_model.values()
    ]
    yield from heapq.merge(*streams, key=_arrival)


def _arrival(row: dict[str, Any]) -> int:
    return int(row["arrival_unix_ns"])
