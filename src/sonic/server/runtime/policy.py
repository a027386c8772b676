"""The batching policy of a model (``dynamic_batching`` of ``config.pbtxt``) and the choice of the next batch.

:func:`choose_batch` is a pure function: the queued requests in priority order and the time in, the
batch to run now or the time to wait until out. It has no threads, clocks or event loop, so every
rule (preferred sizes, queue delay, shapes, ordering) is tested by calling it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tritonclient.grpc import model_config_pb2


@dataclass(frozen=True)
class QueuePolicy:
    max_queue_size: int = 0  # 0: unbounded
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False  # Triton's timeout_action DELAY; else REJECT

    @classmethod
    def from_proto(cls, proto: model_config_pb2.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            max_queue_size=int(proto.max_queue_size),
            default_timeout_us=int(proto.default_timeout_microseconds),
            allow_timeout_override=bool(proto.allow_timeout_override),
            delay_on_timeout=proto.timeout_action == model_config_pb2.ModelQueuePolicy.DELAY,
        )

    def timeout_us(self, requested_us: int) -> int:
        """The queue timeout of a request that asked for ``requested_us`` (0: none asked; result 0: none)."""
        if requested_us and self.allow_timeout_override:
            # As in Triton, a request may shorten the default timeout but never lengthen it.
            return min(requested_us, self.default_timeout_us) if self.default_timeout_us else requested_us
        return self.default_timeout_us


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int  # 0: the model takes no batch dimension
    dynamic: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    default_priority_level: int = 1
    queue_policies: tuple[QueuePolicy, ...] = (QueuePolicy(),)  # index: priority level - 1

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> BatchPolicy:
        if not config.HasField("dynamic_batching"):
            return cls(max_batch_size=int(config.max_batch_size))
        batching = config.dynamic_batching
        levels = max(1, int(batching.priority_levels))
        default = QueuePolicy.from_proto(batching.default_queue_policy)
        policies = tuple(
            QueuePolicy.from_proto(batching.priority_queue_policy[level])
            if level in batching.priority_queue_policy
            else default
            for level in range(1, levels + 1)
        )
        return cls(
            max_batch_size=int(config.max_batch_size),
            dynamic=True,
            preferred_batch_sizes=tuple(sorted(int(s) for s in batching.preferred_batch_size)),
            max_queue_delay_us=int(batching.max_queue_delay_microseconds),
            preserve_ordering=bool(batching.preserve_ordering),
            default_priority_level=int(batching.default_priority_level) or levels // 2 + levels % 2,
            queue_policies=policies,
        )

    def level_for(self, priority: int) -> int:
        """Queue index for a request priority (0: default; 1 is the highest)."""
        if priority <= 0:
            return self.default_priority_level - 1
        return min(priority, len(self.queue_policies)) - 1

    @property
    def max_merge(self) -> int:
        """The most batch rows one execution may merge; 0: one request per execution."""
        return self.max_batch_size if self.dynamic else 0


class Queued(Protocol):
    """What the policy reads of a queued request."""

    @property
    def batch_size(self) -> int: ...

    @property
    def shape_key(self) -> tuple[object, ...]: ...

    @property
    def enqueued_ns(self) -> int: ...


Q = TypeVar("Q", bound=Queued)


def choose_batch(policy: BatchPolicy, queued: Iterable[Q], now_ns: int) -> tuple[list[Q], int | None]:
    """The batch to run now, or ``([], deadline_ns)`` to wait until, or ``([], None)`` to wait for requests.

    ``queued``: the waiting requests, highest priority first and oldest first within a priority.
    """
    max_merge = policy.max_merge
    largest_preferred = max(policy.preferred_batch_sizes, default=0)
    selected: list[Q] = []
    total = 0
    full = False
    preferred_prefix = 0
    for item in queued:
        if not max_merge:
            return [item], None
        if selected and item.shape_key != selected[0].shape_key:
            if policy.preserve_ordering:
                full = True
                break
            # Another shape waits for a later batch; the oldest request still leads this one, so
            # nothing starves, and mixed-shape traffic (variable multiplicities) still merges.
            continue
        if selected and total + item.batch_size > max_merge:
            full = True
            break
        selected.append(item)
        total += item.batch_size
        if total in policy.preferred_batch_sizes:
            preferred_prefix = len(selected)
        if total >= max_merge or (largest_preferred and total >= largest_preferred):
            full = True
            break
    if not selected:
        return [], None
    if full:
        return selected, None
    delay_ns = policy.max_queue_delay_us * 1000
    deadline = min(item.enqueued_ns for item in selected) + delay_ns
    if delay_ns and now_ns >= deadline:
        return selected, None  # the delay is over: whatever is pending runs, as in Triton
    if preferred_prefix:
        # Triton's dynamic batcher: the queued requests that make a preferred size run now; the queue
        # delay is only for growing a batch that makes none (FACILE's 16000 rows, preferred 16000 of
        # 16000, 32000 and 64000, waited out the delay on every request here).
        return selected[:preferred_prefix], None
    return ([], deadline) if delay_ns else (selected, None)
