"""The sequence batcher's rules as pure functions: admission, slots, batch choice, controls, state, idling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from sonic.models.sequence import accumulator_config
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import parse_config_text
from sonic.server.models.paths import ModelFiles
from sonic.server.runtime.sequences import (
    CORRID,
    Flags,
    SequencePolicy,
    SequenceTable,
    choose_sequences,
    control_tensors,
    state_tensors,
)
from sonic.server.work import WorkItem

MS = 1_000_000


def policy(strategy: str = "direct { }", **changes: str) -> SequencePolicy:
    text = accumulator_config("acc", strategy)
    for old, new in changes.items():
        text = text.replace(old, new)
    return SequencePolicy.from_config(parse_config_text(text, "test"), ModelFiles("test", Path()))


def item(enqueued_ns: int, shape: tuple[int, ...] = (1, 1)) -> WorkItem:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
    finally:
        loop.close()
    return WorkItem(
        {"INPUT": np.zeros(shape, np.float32)}, shape[0], (shape[1:],), future, enqueued_ns=enqueued_ns
    )


def admit(table: SequenceTable, corr: int, now: int, *, start: bool = False, end: bool = False) -> None:
    table.admit(item(now), Flags(corr, start, end), now)


def test_policy_from_config() -> None:
    direct = policy()
    assert (direct.direct, direct.max_batch_size, direct.idle_ns, direct.slots) == (True, 4, 5000 * MS, 4)
    assert [c.name for c in direct.controls] == ["START", "END", "READY", "CORRID"]
    assert direct.controls[3].kind == CORRID
    assert direct.controls[3].dtype == np.int64
    assert direct.state_outputs == ("STATE_OUT",)
    np.testing.assert_array_equal(direct.states[0].initial, np.zeros(1, np.float32))
    oldest = policy(
        "oldest { max_queue_delay_microseconds: 100 }", **{"max_sequence_idle_microseconds: 5000000": ""}
    )
    assert (oldest.direct, oldest.max_queue_delay_ns, oldest.idle_ns) == (False, 100_000, 1000 * MS)


def test_control_without_values_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="control input 'START' needs int32_false_true"):
        policy(**{"kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]": "kind: CONTROL_SEQUENCE_START"})


def test_flags_need_a_correlation_id() -> None:
    assert Flags.from_parameters("m", {"sequence_id": "a", "sequence_start": True}) == Flags("a", True, False)
    for parameters in ({}, {"sequence_id": 0}, {"sequence_id": ""}):
        with pytest.raises(InvalidArgumentError, match="non-zero or non-empty correlation ID"):
            Flags.from_parameters("m", parameters)


def test_admission_needs_start_first_and_after_end() -> None:
    table = SequenceTable(policy(), instances=1)
    with pytest.raises(InvalidArgumentError, match="sequence 7 to model 'acc' must specify the START flag"):
        admit(table, 7, 0)
    admit(table, 7, 0, start=True)
    admit(table, 7, 1, end=True)
    with pytest.raises(InvalidArgumentError, match="START flag"):
        admit(table, 7, 2)
    admit(table, 7, 3, start=True)  # a new sequence with the same id queues behind the old one
    assert len(table.sequences[7].pending) == 3


def test_direct_gives_each_sequence_a_slot_and_pads_the_batch() -> None:
    table = SequenceTable(policy(), instances=2)  # 2 instances x 4 slots
    for corr in range(1, 7):
        admit(table, corr, corr, start=True)
    slots = {corr: s.slot for corr, s in table.sequences.items()}
    assert slots == {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5}
    table.sequences[2].pending.clear()  # slot 1 has no request ready: READY false there
    chosen, _ = choose_sequences(table, 0, 10)
    assert [s.correlation_id if s else None for s in chosen] == [1, None, 3, 4]
    chosen, _ = choose_sequences(table, 1, 10)
    assert [s.correlation_id if s else None for s in chosen] == [5, 6]


def test_direct_sequences_wait_for_a_free_slot() -> None:
    table = SequenceTable(policy(), instances=1)
    for corr in range(1, 6):
        admit(table, corr, corr, start=True, end=True)
    assert table.sequences[5].slot is None
    first = table.sequences[1]
    first.pending.clear()
    table.finished(first, ended=True, now_ns=10)
    assert 1 not in table.sequences
    assert table.sequences[5].slot == 0


def test_a_running_sequence_is_not_chosen_again() -> None:
    table = SequenceTable(policy(), instances=1)
    admit(table, 1, 0, start=True)
    admit(table, 1, 1)
    table.sequences[1].running = True
    assert choose_sequences(table, 0, 5) == ([], None)


def test_oldest_takes_the_longest_waiting_and_waits_for_its_delay() -> None:
    table = SequenceTable(policy("oldest { max_queue_delay_microseconds: 1000 }"), instances=1)
    admit(table, 2, 20, start=True)
    admit(table, 1, 10, start=True)
    assert choose_sequences(table, 0, 15) == ([], 10 + 1000 * 1000)
    chosen, deadline = choose_sequences(table, 0, 10 + 1000 * 1000)
    assert [s.correlation_id for s in chosen if s] == [1, 2]
    assert deadline is None
    for corr in (3, 4):
        admit(table, corr, 30, start=True)
    chosen, _ = choose_sequences(table, 0, 31)  # full batch: no waiting
    assert [s.correlation_id for s in chosen if s] == [1, 2, 3, 4]


def test_requests_of_other_shapes_wait_for_a_later_batch() -> None:
    table = SequenceTable(policy("oldest { }"), instances=1)
    table.admit(item(1), Flags(1, True, False), 1)
    table.admit(item(2, (1, 2)), Flags(2, True, False), 2)
    table.admit(item(3), Flags(3, True, False), 3)
    chosen, _ = choose_sequences(table, 0, 5)
    assert [s.correlation_id for s in chosen if s] == [1, 3]


def test_idle_sequences_expire() -> None:
    table = SequenceTable(policy(), instances=1)
    admit(table, 1, 0, start=True)
    admit(table, 2, 0, start=True)
    table.sequences[1].pending.clear()
    assert table.expire(4999 * MS) == []
    assert [s.correlation_id for s in table.expire(5000 * MS)] == [1]  # 2 still has a request queued
    assert table.sequences.keys() == {2}


def test_control_and_state_tensors() -> None:
    p = policy()
    table = SequenceTable(p, instances=1)
    admit(table, 9, 0, start=True)
    sequence = table.sequences[9]
    controls = control_tensors(p, Flags(9, True, False), batched=True)
    assert {n: a.tolist() for n, a in controls.items()} == {
        "START": [[1]],
        "END": [[0]],
        "READY": [[1]],
        "CORRID": [[9]],
    }
    empty = control_tensors(p, None, batched=True)
    assert {n: a.tolist() for n, a in empty.items()} == {
        "START": [[0]],
        "END": [[0]],
        "READY": [[0]],
        "CORRID": [[0]],
    }
    with pytest.raises(InvalidArgumentError, match="sequence id 'x' is a string"):
        control_tensors(p, Flags("x", True, False), batched=True)
    sequence.state["STATE_OUT"] = np.array([5.0], np.float32)
    assert state_tensors(p, sequence, Flags(9, False, False), batched=True)["STATE_IN"].tolist() == [[5.0]]
    assert state_tensors(p, sequence, Flags(9, True, False), batched=True)["STATE_IN"].tolist() == [[0.0]]


def test_initial_state_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s.bin").write_bytes(np.array([2.5], np.float32).tobytes())
    text = accumulator_config("acc").replace(
        'output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] }',
        'output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] initial_state { data_type: TYPE_FP32 dims: [ 1 ] data_file: "s.bin" name: "s" } }',
    )
    p = SequencePolicy.from_config(parse_config_text(text, "test"), ModelFiles("test", tmp_path))
    assert p.states[0].initial.tolist() == [2.5]
