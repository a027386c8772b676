"""The pure batch choice: queued requests and a time in, a batch or a deadline out (no threads, no clock)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sonic.server.runtime.policy import BatchPolicy, QueuePolicy, choose_batch

pytestmark = pytest.mark.unit

MS = 1_000_000


@dataclass
class Req:
    name: str
    batch_size: int = 1
    shape_key: tuple[object, ...] = ("x",)
    enqueued_ns: int = 0


def names(batch: list[Req]) -> list[str]:
    return [r.name for r in batch]


def test_nothing_queued_waits_for_requests() -> None:
    assert choose_batch(BatchPolicy(max_batch_size=8, dynamic=True), [], 0) == ([], None)


def test_without_dynamic_batching_one_request_per_execution() -> None:
    queued = [Req("a"), Req("b")]
    batch, deadline = choose_batch(BatchPolicy(max_batch_size=8), queued, 0)
    assert (names(batch), deadline) == (["a"], None)


def test_merges_up_to_max_batch_size_without_splitting_a_request() -> None:
    queued = [Req("a", 3), Req("b", 3), Req("c", 3)]
    batch, _ = choose_batch(BatchPolicy(max_batch_size=8, dynamic=True), queued, 0)
    assert names(batch) == ["a", "b"]  # a third request of 3 rows would make 9 > 8


def test_a_request_larger_than_the_rest_of_the_batch_still_runs_alone() -> None:
    batch, _ = choose_batch(BatchPolicy(max_batch_size=4, dynamic=True), [Req("big", 4), Req("b")], 0)
    assert names(batch) == ["big"]


def test_queue_delay_waits_for_more_until_the_oldest_deadline() -> None:
    policy = BatchPolicy(max_batch_size=8, dynamic=True, max_queue_delay_us=1000)
    queued = [Req("a", enqueued_ns=5 * MS), Req("b", enqueued_ns=5 * MS + 10)]
    assert choose_batch(policy, queued, 5 * MS + 500_000) == ([], 6 * MS)
    batch, deadline = choose_batch(policy, queued, 6 * MS)
    assert (names(batch), deadline) == (["a", "b"], None)


def test_a_full_batch_does_not_wait_for_the_delay() -> None:
    policy = BatchPolicy(max_batch_size=2, dynamic=True, max_queue_delay_us=60_000_000)
    batch, deadline = choose_batch(policy, [Req("a"), Req("b"), Req("c")], 0)
    assert (names(batch), deadline) == (["a", "b"], None)


def test_largest_preferred_size_runs_at_once() -> None:
    policy = BatchPolicy(max_batch_size=8, dynamic=True, preferred_batch_sizes=(4,), max_queue_delay_us=10**9)
    batch, _ = choose_batch(policy, [Req(str(i)) for i in range(6)], 0)
    assert names(batch) == ["0", "1", "2", "3"]


def test_after_the_delay_whatever_is_pending_runs() -> None:
    # Triton's GetDynamicBatch: once the oldest request waited the delay out, the pending batch runs as it
    # is (it is cut back to a preferred size only while the delay still runs).
    policy = BatchPolicy(max_batch_size=8, dynamic=True, preferred_batch_sizes=(2, 6), max_queue_delay_us=1)
    batch, _ = choose_batch(policy, [Req(str(i)) for i in range(3)], 1 * MS)
    assert names(batch) == ["0", "1", "2"]


def test_a_preferred_size_runs_at_once_below_the_largest() -> None:
    # Triton's dynamic batcher: a preferred size made by the queued requests runs now; only a batch that
    # makes none waits out the delay (FACILE b16000, preferred 16000, 32000 and 64000, waited 100 µs).
    policy = BatchPolicy(
        max_batch_size=65536,
        dynamic=True,
        preferred_batch_sizes=(16000, 32000, 64000),
        max_queue_delay_us=100,
    )
    assert names(choose_batch(policy, [Req("a", 16000)], 0)[0]) == ["a"]
    assert choose_batch(policy, [Req("a", 15000)], 0) == ([], 100_000)
    two_of_three = BatchPolicy(
        max_batch_size=8, dynamic=True, preferred_batch_sizes=(2, 6), max_queue_delay_us=10**9
    )
    assert choose_batch(two_of_three, [Req(str(i)) for i in range(3)], 0) == ([Req("0"), Req("1")], None)


def test_without_a_delay_the_largest_preferred_prefix_runs() -> None:
    policy = BatchPolicy(max_batch_size=8, dynamic=True, preferred_batch_sizes=(2, 6))
    assert names(choose_batch(policy, [Req(str(i)) for i in range(3)], 0)[0]) == ["0", "1"]
    assert names(choose_batch(policy, [Req("a", 3)], 0)[0]) == ["a"]  # no preferred size: what is queued


def test_other_shapes_wait_for_their_own_batch() -> None:
    queued = [Req("a", shape_key=(2,)), Req("b", shape_key=(3,)), Req("c", shape_key=(2,))]
    batch, _ = choose_batch(BatchPolicy(max_batch_size=8, dynamic=True), queued, 0)
    assert names(batch) == ["a", "c"]


def test_preserve_ordering_stops_at_the_first_other_shape() -> None:
    queued = [Req("a", shape_key=(2,)), Req("b", shape_key=(3,)), Req("c", shape_key=(2,))]
    policy = BatchPolicy(max_batch_size=8, dynamic=True, preserve_ordering=True)
    batch, _ = choose_batch(policy, queued, 0)
    assert names(batch) == ["a"]


def test_priority_levels_and_queue_timeouts() -> None:
    policy = BatchPolicy(
        max_batch_size=1, dynamic=True, default_priority_level=2, queue_policies=(QueuePolicy(),) * 3
    )
    assert [policy.level_for(p) for p in (0, 1, 2, 3, 9)] == [1, 0, 1, 2, 2]
    override = QueuePolicy(default_timeout_us=500, allow_timeout_override=True)
    assert [override.timeout_us(t) for t in (0, 100, 900)] == [500, 100, 500]  # shorten, never lengthen
    assert QueuePolicy(default_timeout_us=500).timeout_us(100) == 500  # no override allowed
    assert QueuePolicy(allow_timeout_override=True).timeout_us(100) == 100
