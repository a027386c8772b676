"""The sequence batcher's rules (``sequence_batching`` of ``config.pbtxt``) as pure functions and data.

A stateful model sees the requests of one sequence (one correlation id) in order, never two of them
in one execution, with control inputs telling it where a sequence starts and ends:

- :class:`SequencePolicy`: the config section: strategy (``direct``: each sequence keeps one batch
  slot of one instance; ``oldest``: batches of the sequences waiting longest), control inputs
  (START, END, READY, CORRID), implicit ``state`` and ``max_sequence_idle_microseconds``;
- :class:`SequenceTable`: the live sequences, admitted by the request parameters ``sequence_id``,
  ``sequence_start`` and ``sequence_end``, and released at END or after being idle too long;
- :func:`choose_sequences`: which sequences' next requests run together now.

No clocks, threads or event loop here: the time is an argument, so unit tests call everything.
:mod:`.sequence_scheduler` runs these rules on the event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.server.models.paths import INITIAL_STATE_DIR, ModelFiles
from sonic.server.work import WorkItem

Control = model_config_pb2.ModelSequenceBatching.Control
START, END, READY, CORRID = (
    Control.CONTROL_SEQUENCE_START,
    Control.CONTROL_SEQUENCE_END,
    Control.CONTROL_SEQUENCE_READY,
    Control.CONTROL_SEQUENCE_CORRID,
)
DEFAULT_IDLE_US = 1_000_000  # Triton's max_sequence_idle_microseconds default

CorrelationId = int | str


@dataclass(frozen=True)
class ControlInput:
    name: str
    kind: int
    dtype: np.dtype[Any]
    false_true: tuple[object, object] = (0, 1)  # START/END/READY: the values for false and true


@dataclass(frozen=True)
class StateSpec:
    input_name: str
    output_name: str
    dtype: np.dtype[Any]
    initial: npt.NDArray[Any]  # one sequence's state at its start, without the batch dimension


def _control(model: str, name: str, control: Any) -> ControlInput:
    if control.kind == CORRID:
        if control.data_type == model_config_pb2.TYPE_INVALID:
            raise ModelConfigError(f"model '{model}': CORRID control input '{name}' needs a data_type")
        return ControlInput(name, CORRID, dtypes.from_config_enum(control.data_type).numpy)
    for values, dtype in (
        (control.int32_false_true, np.dtype(np.int32)),
        (control.fp32_false_true, np.dtype(np.float32)),
        (control.bool_false_true, np.dtype(np.bool_)),
    ):
        if values:
            if len(values) != 2:
                raise ModelConfigError(
                    f"model '{model}': control input '{name}' needs two values (false, true), got {list(values)}"
                )
            return ControlInput(name, control.kind, dtype, (values[0], values[1]))
    raise ModelConfigError(
        f"model '{model}': control input '{name}' needs int32_false_true, fp32_false_true or bool_false_true"
    )


def check_controls(config: model_config_pb2.ModelConfig) -> None:
    """The sequence batcher's control inputs, checked before any version loads: Triton refuses a control
    without its values or data type while it polls the repository."""
    for entry in config.sequence_batching.control_input:
        for control in entry.control:
            _control(config.name, entry.name, control)


def _state(model: str, files: ModelFiles, state: Any) -> StateSpec:
    dtype = dtypes.from_config_enum(state.data_type).numpy
    dims = tuple(int(d) for d in state.dims)
    initial = state.initial_state[0] if state.initial_state else None  # Triton reads the first
    if initial is not None and initial.data_file:
        field = f"sequence_batching state '{state.input_name}' initial_state data_file"
        path = files.path(field, initial.data_file, INITIAL_STATE_DIR)
        shown = f"{INITIAL_STATE_DIR}/{initial.data_file}"
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelConfigError(f"model '{model}': initial state file {shown}: {exc.strerror}") from None
        shape = tuple(int(d) for d in initial.dims) or dims
        try:
            array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        except ValueError:
            raise ModelConfigError(
                f"model '{model}': initial state file {shown} has {len(data)} bytes, not {list(shape)} of {dtype}"
            ) from None
        return StateSpec(state.input_name, state.output_name, dtype, array)
    shape = tuple(int(d) for d in initial.dims) if initial is not None else dims
    if any(d < 0 for d in shape):
        raise ModelConfigError(
            f"model '{model}': state '{state.input_name}' has variable dims {list(shape)}: give an "
            f"initial_state with fixed dims"
        )
    return StateSpec(state.input_name, state.output_name, dtype, np.zeros(shape, dtype=dtype))


@dataclass(frozen=True)
class SequencePolicy:
    model: str
    max_batch_size: int  # 0: no batch dimension, one request per execution
    direct: bool
    idle_ns: int
    max_queue_delay_ns: int  # oldest: how long a batch may wait to fill
    controls: tuple[ControlInput, ...]
    states: tuple[StateSpec, ...]

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig, files: ModelFiles) -> SequencePolicy:
        section = config.sequence_batching
        controls = tuple(
            _control(config.name, entry.name, control)
            for entry in section.control_input
            for control in entry.control
        )
        states = tuple(_state(config.name, files, state) for state in section.state)
        direct = section.WhichOneof("strategy_choice") != "oldest"
        delay_us = section.oldest.max_queue_delay_microseconds if not direct else 0
        return cls(
            model=config.name,
            max_batch_size=int(config.max_batch_size),
            direct=direct,
            idle_ns=int(section.max_sequence_idle_microseconds or DEFAULT_IDLE_US) * 1000,
            max_queue_delay_ns=int(delay_us) * 1000,
            controls=controls,
            states=states,
        )

    @property
    def slots(self) -> int:
        """Batch slots per instance."""
        return max(1, self.max_batch_size)

    @property
    def state_outputs(self) -> tuple[str, ...]:
        return tuple(state.output_name for state in self.states)


@dataclass(frozen=True)
class Flags:
    """A request's place in its sequence, from its parameters."""

    correlation_id: CorrelationId
    start: bool
    end: bool

    @classmethod
    def from_parameters(cls, model: str, parameters: Mapping[str, object]) -> Flags:
        corr = parameters.get("sequence_id", 0)
        if not isinstance(corr, int | str) or isinstance(corr, bool) or corr in (0, ""):
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )
        return cls(corr, bool(parameters.get("sequence_start")), bool(parameters.get("sequence_end")))


@dataclass(eq=False)
class Sequence:
    """One live sequence: its queued requests, its batch slot (direct) and its implicit state."""

    correlation_id: CorrelationId
    pending: deque[tuple[WorkItem, Flags]] = field(default_factory=deque)
    slot: int | None = None  # direct: instance * slots + position; None: waiting for a slot
    open: bool = True  # False once its END request is queued: the next request must START again
    running: bool = False  # one of its requests is executing
    last_ns: int = 0  # when a request of it last arrived or finished
    state: dict[str, npt.NDArray[Any]] = field(default_factory=dict)  # state output -> last value

    @property
    def idle(self) -> bool:
        return not self.pending and not self.running


class SequenceTable:
    """The live sequences of one model version, by correlation id."""

    def __init__(self, policy: SequencePolicy, instances: int) -> None:
        self.policy = policy
        self.sequences: dict[CorrelationId, Sequence] = {}
        self._free_slots = list(range(instances * policy.slots)) if policy.direct else []
        self._waiting: deque[Sequence] = deque()  # direct: sequences with no slot yet, oldest first

    def admit(self, item: WorkItem, flags: Flags, now_ns: int) -> Sequence:
        """Queue a request on its sequence (InvalidArgumentError when it needs START and has none)."""
        if isinstance(flags.correlation_id, str):
            # Refused here, before queueing: found while building the batch it would leave the caller
            # waiting forever (Triton passes the string's bytes on as the number).
            for control in self.policy.controls:
                if control.kind == CORRID and control.dtype != np.object_:
                    raise InvalidArgumentError(
                        f"model '{self.policy.model}': sequence id {flags.correlation_id!r} is a string, but "
                        f"control input '{control.name}' takes {control.dtype} correlation ids"
                    )
        sequence = self.sequences.get(flags.correlation_id)
        if (sequence is None or not sequence.open) and not flags.start:
            raise InvalidArgumentError(
                f"inference request for sequence {flags.correlation_id} to model '{self.policy.model}' must "
                f"specify the START flag on the first request of the sequence"
            )
        if sequence is None:
            sequence = Sequence(flags.correlation_id)
            self.sequences[flags.correlation_id] = sequence
            if self.policy.direct:
                self._waiting.append(sequence)
                self._assign_slots()
        sequence.open = not flags.end
        sequence.pending.append((item, flags))
        sequence.last_ns = now_ns
        return sequence

    def withdraw(self, sequence: Sequence, item: WorkItem) -> None:
        """Take a request that will not run (cancelled, unloaded) out of its sequence."""
        for entry in sequence.pending:
            if entry[0] is item:
                sequence.pending.remove(entry)
                break

    def finished(self, sequence: Sequence, ended: bool, now_ns: int) -> None:
        """A request of ``sequence`` ran; an END request releases it unless more requests wait."""
        sequence.running = False
        sequence.last_ns = now_ns
        if ended and sequence.idle and not sequence.open:
            self.release(sequence)

    def expire(self, now_ns: int) -> list[Sequence]:
        """Release the sequences idle for longer than ``max_sequence_idle_microseconds``."""
        expired = [s for s in self.sequences.values() if s.idle and now_ns - s.last_ns >= self.policy.idle_ns]
        for sequence in expired:
            self.release(sequence)
        return expired

    def release(self, sequence: Sequence) -> None:
        if self.sequences.get(sequence.correlation_id) is sequence:
            del self.sequences[sequence.correlation_id]
        if sequence in self._waiting:
            self._waiting.remove(sequence)
        if sequence.slot is not None:
            self._free_slots.append(sequence.slot)
            self._free_slots.sort()
            sequence.slot = None
            self._assign_slots()

    def _assign_slots(self) -> None:
        while self._waiting and self._free_slots:
            self._waiting.popleft().slot = self._free_slots.pop(0)


def choose_sequences(
    table: SequenceTable, instance: int, now_ns: int
) -> tuple[list[Sequence | None], int | None]:
    """The sequences whose next requests instance ``instance`` runs now (batch positions in order).

    ``direct``: position p holds the sequence in the instance's slot p, None where that slot has no
    request ready (the model sees READY false there). ``oldest``: the sequences whose next request
    waits longest, up to ``max_batch_size``. Requests merge only with requests of the same shapes.
    Returns ``([], deadline)`` to wait until then (oldest with a queue delay), ``([], None)`` to
    wait for requests.
    """
    policy = table.policy
    ready = [s for s in table.sequences.values() if s.pending and not s.running]
    if policy.direct:
        first = instance * policy.slots
        ready = [s for s in ready if s.slot is not None and first <= s.slot < first + policy.slots]
    ready.sort(key=lambda s: s.pending[0][0].enqueued_ns)
    chosen: list[Sequence] = []
    for sequence in ready:
        if chosen and sequence.pending[0][0].shape_key != chosen[0].pending[0][0].shape_key:
            continue
        chosen.append(sequence)
        if len(chosen) == policy.slots:
            break
    if not chosen:
        return [], None
    if policy.direct:
        by_position = {s.slot - instance * policy.slots: s for s in chosen if s.slot is not None}
        return [by_position.get(p) for p in range(max(by_position) + 1)], None
    if len(chosen) < policy.slots and policy.max_queue_delay_ns:
        deadline = chosen[0].pending[0][0].enqueued_ns + policy.max_queue_delay_ns
        if now_ns < deadline:
            return [], deadline
    return list(chosen), None


def control_tensors(
    policy: SequencePolicy, flags: Flags | None, batched: bool
) -> dict[str, npt.NDArray[Any]]:
    """One request's control inputs (``flags`` None: an empty direct slot, READY false)."""
    shape = (1, 1) if batched else (1,)
    tensors: dict[str, npt.NDArray[Any]] = {}
    for control in policy.controls:
        if control.kind == CORRID:
            value: object = flags.correlation_id if flags is not None else 0
            if control.dtype == np.object_:
                value = str(value).encode()
            elif isinstance(value, str):
                raise InvalidArgumentError(
                    f"model '{policy.model}': sequence id {value!r} is a string, but control input "
                    f"'{control.name}' takes {control.dtype} correlation ids"
                )
            tensors[control.name] = np.full(shape, value, dtype=control.dtype)
            continue
        on = flags is not None and (
            (control.kind == START and flags.start)
            or (control.kind == END and flags.end)
            or control.kind == READY
        )
        tensors[control.name] = np.full(shape, control.false_true[int(on)], dtype=control.dtype)
    return tensors


def state_tensors(
    policy: SequencePolicy, sequence: Sequence | None, flags: Flags | None, batched: bool
) -> dict[str, npt.NDArray[Any]]:
    """One request's implicit state inputs: the sequence's last state, the initial one at START."""
    tensors = {}
    for spec in policy.states:
        start = sequence is None or flags is None or flags.start
        value = spec.initial if start else sequence.state.get(spec.output_name, spec.initial)  # type: ignore[union-attr]
        tensors[spec.input_name] = value[np.newaxis] if batched else value
    return tensors
