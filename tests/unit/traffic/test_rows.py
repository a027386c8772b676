"""A traffic row from a request: bytes, parameters, and the status of a request that failed."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from sonic.protocol.errors import UnavailableError
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.metrics.stats import RequestTiming
from sonic.server.traffic.rows import PENDING_FIELDS, Pending, request_row
from sonic.server.traffic.table import pending_to_table
from sonic.traffic.schema import COLUMN_NAMES
from sonic.traffic.signatures import Signatures

pytestmark = pytest.mark.unit


def _row(pending: Pending, signatures: Signatures | None = None) -> dict[str, object]:
    table = pending_to_table([pending], signatures)
    assert table.column_names == list(COLUMN_NAMES)
    (row,) = table.to_pylist()
    return dict(row)


def _request() -> InferRequest:
    raw = InputTensor("X", "FP32", (2, 2), raw=memoryview(np.ones(4, np.float32).tobytes()))
    text = InputTensor("S", "BYTES", (1,), array=np.array([b"abc"], dtype=np.object_))
    parameters: dict[str, object] = {"sequence_id": "run-1", "sequence_end": True}
    return InferRequest("m", "", [raw, text], request_id="r", parameters=parameters)


def test_a_successful_request_row() -> None:
    timing = RequestTiming(2000, 1000, 5000, 1000, execution=9, execution_batch_size=4)
    row = _row(request_row(_request(), 3, 2, timing, 12_000, [np.zeros(3, np.float64)]))
    assert row["version"] == "3"
    assert row["status"] == "OK"
    assert row["input_names"] == ["X", "S"]
    assert row["input_datatypes"] == ["FP32", "BYTES"]
    assert row["input_shapes"] == [[2, 2], [1]]
    assert row["input_bytes"] == 16 + 3
    assert row["output_bytes"] == 24
    assert row["sequence_id"] == "run-1"
    assert row["sequence_end"] is True
    assert (row["queue_us"], row["compute_infer_us"], row["total_us"]) == (2, 5, 12)
    assert (row["executed_batch_id"], row["executed_batch_size"]) == (9, 4)
    assert row["contents"] is None  # not sampled


def test_a_failed_request_row_names_its_status_and_keeps_no_timing() -> None:
    error = UnavailableError("queue full")
    row = _row(request_row(_request(), 1, 2, None, 5000, error=error))
    assert row["status"] == "UNAVAILABLE"
    assert row["output_bytes"] == 0
    assert row["queue_us"] == 0
    assert row["total_us"] == 5


def test_contents_of_json_bytes_inputs_are_not_kept() -> None:
    assert _row(request_row(_request(), 1, 2, None, 1, keep_contents=True))["contents"] is None
    numeric = InferRequest("m", "", [InputTensor("X", "FP32", (1,), array=np.array([2.0], np.float32))])
    row = _row(request_row(numeric, 1, 1, None, 1, keep_contents=True))
    assert row["contents"] == [np.array([2.0], np.float32).tobytes()]


def test_many_requests_share_their_signatures_in_order() -> None:
    one = InferRequest("m", "", [InputTensor("X", "FP32", (1, 4), raw=memoryview(bytes(16)))])
    two = InferRequest("m", "", [InputTensor("X", "FP32", (2, 4), raw=memoryview(bytes(32)))])
    table = pending_to_table([request_row(r, 1, 1, None, 1) for r in (one, two, one, two, two)])
    assert table.column("input_shapes").to_pylist() == [[[1, 4]], [[2, 4]], [[1, 4]], [[2, 4]], [[2, 4]]]


def test_numbered_signatures_leave_a_record_the_collector_lets_go_of_at_once() -> None:
    """A record waits a second on the loop: one that stays tracked is promoted and makes full collections
    come more often (sonic.traffic.signatures). Numbered, it is untracked by the first collection."""
    signatures = Signatures()
    nested = request_row(_request(), 1, 2, None, 1)
    flat = request_row(_request(), 1, 2, None, 1, signatures=signatures)
    gc.collect()
    assert gc.is_tracked(nested)  # the nested signature keeps it tracked for one collection per level
    assert not gc.is_tracked(flat)
    same = {key: value for key, value in _row(flat, signatures).items() if key != "arrival_unix_ns"}
    assert same == {key: value for key, value in _row(nested).items() if key != "arrival_unix_ns"}


def test_signatures_past_the_limit_are_handed_over_whole() -> None:
    signatures = Signatures(limit=1)
    one = InferRequest("m", "", [InputTensor("X", "FP32", (1, 4), raw=memoryview(bytes(16)))])
    two = InferRequest("m", "", [InputTensor("X", "FP32", (2, 4), raw=memoryview(bytes(32)))])
    records = [request_row(r, 1, 1, None, 1, signatures=signatures) for r in (one, two, one, two)]
    assert [record[PENDING_FIELDS.index("signature")] for record in records][::2] == [0, 0]
    assert len(signatures.known) == 1
    table = pending_to_table(records, signatures)
    assert table.column("input_shapes").to_pylist() == [[[1, 4]], [[2, 4]], [[1, 4]], [[2, 4]]]


def test_responses_one_on_success_none_on_error_or_as_a_stream_counted() -> None:
    assert _row(request_row(_request(), 1, 1, None, 10))["responses"] == 1
    failed = request_row(_request(), 1, 1, None, 10, error=UnavailableError("gone"))
    assert _row(failed)["responses"] == 0
    streamed = _row(request_row(_request(), 1, 1, None, 10, responses=5, output_bytes=40))
    assert (streamed["responses"], streamed["output_bytes"]) == (5, 40)
