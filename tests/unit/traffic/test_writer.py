"""The traffic recorder: rows written and read back, files rotated and capped, memory bounded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.schema import (
    COLUMN_NAMES,
    METADATA_KEY,
    SCHEMA_VERSION,
    arrow_schema,
    read_traffic,
    traffic_files,
)
from sonic.traffic.writer import Row, TrafficLog

pytestmark = pytest.mark.unit


def _row(model: str = "m", arrival: int = 1, contents: list[bytes] | None = None) -> Row:
    values = {
        "arrival_unix_ns": arrival,
        "model": model,
        "version": "1",
        "request_id": f"r{arrival}",
        "status": "OK",
        "batch_size": 2,
        "input_names": ["X"],
        "input_datatypes": ["FP32"],
        "input_shapes": [[2, 3]],
        "input_bytes": 24,
        "output_bytes": 8,
        "sequence_id": "",
        "sequence_start": False,
        "sequence_end": False,
        "priority": 0,
        "timeout_us": 0,
        "queue_us": 5,
        "compute_input_us": 1,
        "compute_infer_us": 10,
        "compute_output_us": 1,
        "total_us": 20,
        "executed_batch_id": 3,
        "executed_batch_size": 4,
        "responses": 1,
        "contents": contents,
    }
    assert tuple(values) == COLUMN_NAMES
    return tuple(values.values())


def _log(tmp_path: Path, **options: object) -> TrafficLog:
    log = TrafficLog(TrafficLogConfig(tmp_path / "traffic", flush_interval_s=3600, **options))  # type: ignore[arg-type]
    log.start()
    return log


def test_rows_are_read_back_by_model_and_arrival(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for arrival in (3, 1, 2):
        log.record(_row("a", arrival))
    log.record(_row("b", 4, contents=[b"\x00" * 24]))
    log.close()
    table = read_traffic(tmp_path / "traffic")
    assert table.column("arrival_unix_ns").to_pylist() == [1, 2, 3, 4]
    assert table.column("model").to_pylist() == ["a", "a", "a", "b"]
    assert table.column("input_shapes").to_pylist()[0] == [[2, 3]]
    assert table.column("contents").to_pylist() == [None, None, None, [b"\x00" * 24]]
    assert read_traffic(tmp_path / "traffic", models=("b",)).num_rows == 1
    files = list(traffic_files(tmp_path / "traffic"))
    assert [f.parent.name for f in files] == ["a", "b"]
    assert pq.read_schema(files[0]).metadata[METADATA_KEY] == SCHEMA_VERSION.encode()
    assert log.written == 4
    assert log.dropped == 0


def test_files_rotate_past_their_size_and_the_oldest_go_past_the_total(tmp_path: Path) -> None:
    log = _log(tmp_path, max_file_bytes=1, max_total_bytes=3 * 4096)  # every flush closes its file
    for arrival in range(1, 11):
        log.record(_row("m", arrival))
        log._flush()  # what the thread does each interval
    log.close()
    files = list(traffic_files(tmp_path / "traffic"))
    assert 1 <= len(files) < 10
    assert sum(f.stat().st_size for f in files) <= 3 * 4096
    # The newest survive.
    assert read_traffic(tmp_path / "traffic").column("arrival_unix_ns").to_pylist()[-1] == 10


def test_pending_rows_are_bounded_and_the_rest_counted(tmp_path: Path) -> None:
    log = _log(tmp_path, max_pending_records=5)
    for arrival in range(1, 9):
        log.record(_row("m", arrival))
    assert log.dropped == 3
    log.close()
    assert read_traffic(tmp_path / "traffic").num_rows == 5


def test_contents_over_their_caps_are_left_out_but_the_row_kept(tmp_path: Path) -> None:
    log = _log(tmp_path, max_contents_bytes=10, max_pending_contents_bytes=16)
    log.record(_row("m", 1, contents=[b"x" * 11]))  # over the per-request cap
    log.record(_row("m", 2, contents=[b"x" * 8]))
    log.record(_row("m", 3, contents=[b"x" * 8]))
    log.record(_row("m", 4, contents=[b"x" * 8]))  # 24 > 16 pending: left out
    log.close()
    kept = read_traffic(tmp_path / "traffic").column("contents").to_pylist()
    assert kept == [None, [b"x" * 8], [b"x" * 8], None]
    assert log.contents_dropped == 2


def test_sampling_keeps_every_nth_request_and_nothing_while_disabled(tmp_path: Path) -> None:
    log = _log(tmp_path, sample_contents_every=3)
    assert [log.wants_contents() for _ in range(6)] == [False, False, True, False, False, True]
    log.enabled = False
    assert not log.wants_contents()
    log.record(_row("m", 1))
    log.close()
    assert read_traffic(tmp_path / "traffic").num_rows == 0


def test_files_of_an_earlier_run_count_towards_the_total(tmp_path: Path) -> None:
    first = _log(tmp_path)
    first.record(_row("m", 1))
    first.close()
    (old,) = traffic_files(tmp_path / "traffic")
    second = _log(tmp_path, max_file_bytes=1, max_total_bytes=old.stat().st_size * 3 // 2)
    second.record(_row("m", 2))
    second.close()
    assert not old.exists()
    assert read_traffic(tmp_path / "traffic").column("arrival_unix_ns").to_pylist() == [2]


@pytest.mark.parametrize("option", ["max_file_bytes", "max_total_bytes", "max_pending_records"])
def test_sizes_must_be_positive(tmp_path: Path, option: str) -> None:
    with pytest.raises(ValueError, match=option):
        TrafficLogConfig(tmp_path, **{option: 0})  # type: ignore[arg-type]


def test_files_of_schema_version_1_read_as_the_current_version(tmp_path: Path) -> None:
    rows = [_row("m", 1), (*_row("m", 2)[:4], "INVALID_ARGUMENT", *_row("m", 2)[5:])]
    current = arrow_schema()
    old_schema = pa.schema([f for f in current if f.name != "responses"], metadata={METADATA_KEY: b"1"})
    columns = [
        list(values)
        for name, values in zip(COLUMN_NAMES, zip(*rows, strict=True), strict=True)
        if name != "responses"
    ]
    folder = tmp_path / "traffic" / "m"
    folder.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, old_schema, strict=True)], schema=old_schema
        ),
        folder / "traffic-old.parquet",
    )
    table = read_traffic(tmp_path / "traffic")
    assert table.column_names == list(COLUMN_NAMES)
    assert table.column("responses").to_pylist() == [1, 0]  # one response each, none for the refused one
    assert table.schema.metadata[METADATA_KEY] == SCHEMA_VERSION.encode()
