"""Triton's trace settings: global and per model, their sampling counters, and the settings API's changes.

As Triton 2.51's ``TraceManager`` (its ``tracer.cc``): the global setting starts as the command line gave
it; a model's setting exists only once a setting was asked for it, and mirrors the global one in every
field not asked for (a change of the global setting reaches it). A null (HTTP) or empty (gRPC) value
clears a field: a model's goes back to the global one, the global one to the command line's. Each change
makes a new setting object, so sampling starts over (its counters are its own) and the old one's traces
are written out. A setting that would trace but cannot (rate 0, Triton mode without a file) is refused,
except when it turns tracing off.

A setting samples every ``rate``-th request it is asked about, ``count`` of them (-1: no limit; the
setting answers the count left). Its traces are kept until ``log_frequency`` of them (or the last of
its count) are there, and then written together to ``<file>.<n>``; without a log frequency or count,
each trace goes to ``<file>`` as it completes (Triton keeps them in memory until it exits), so memory
stays bounded.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sonic.protocol.errors import InvalidArgumentError, UnimplementedError
from sonic.server.trace.config import INT32_MAX, UINT32_MAX, TraceConfig, TraceLevel, TraceMode, leading_int
from sonic.server.trace.files import TraceFile

FIELDS = ("level", "rate", "count", "log_frequency")
KEYS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}
TRACE_FILE_REFUSED = "trace file location can not be updated through network protocol"


class Clear(enum.Enum):
    """A field asked back to what it falls back on (JSON null, a gRPC value without strings)."""

    CLEAR = "clear"


CLEAR = Clear.CLEAR
Change = TraceLevel | int | Clear
Changes = dict[str, Change]  # by field: level, rate, count, log_frequency
Answer = dict[str, "list[str] | str"]


@dataclass(eq=False)
class TraceSetting:
    """One setting object: its values, which of them were asked for, its sampling and pending traces."""

    level: TraceLevel
    rate: int
    count: int  # traces left to take (-1: no limit)
    log_frequency: int
    file: TraceFile
    mode: TraceMode
    options: tuple[tuple[str, str], ...]
    specified: frozenset[str] = frozenset()
    sampled: int = 0  # requests asked about
    collected: int = 0  # traces written in
    _stream: list[str] = field(default_factory=list)  # traces kept for the next numbered file
    _retired: bool = False
    _streams_to_main: bool = field(init=False)

    def __post_init__(self) -> None:
        # No count limit and no log frequency: nothing ever goes to a numbered file (see the module doc).
        self._streams_to_main = self.count == -1 and self.log_frequency == 0

    @property
    def invalid_reason(self) -> str:
        if self.level == TraceLevel.OFF:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if self.mode is TraceMode.TRITON and not self.file.name:
            return "trace file name is not given"
        return ""

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced (``force``: OpenTelemetry's, when the client's trace is sampled)."""
        hit = False
        if self.rate != 0:
            if self.invalid_reason and not force:
                return False
            self.sampled += 1
            hit = self.sampled % self.rate == 0
            if hit and self.count > 0:
                self.count -= 1
            elif hit and self.count == 0:
                hit = False
        return hit or force

    def write(self, trace: str) -> None:
        """One completed trace (its objects, comma-separated; "" for one that never reached its model, which
        counts as collected but writes nothing) into this setting's file."""
        self.collected += 1
        if self._streams_to_main:
            if trace:
                self.file.save(trace, to_index_file=False)
            return
        if trace:
            self._stream.append(trace)
        full = (self.count == 0 and self.collected == self.sampled) or (
            self.log_frequency != 0 and len(self._stream) >= self.log_frequency
        )
        if (full or self._retired) and self._stream:
            self._flush(to_index_file=full or self.log_frequency != 0)

    def retire(self) -> None:
        """Replaced (or the server stops): what is kept is written, and so will be traces still running."""
        self._retired = True
        if self._stream:
            self._flush(to_index_file=self.log_frequency != 0)

    def _flush(self, *, to_index_file: bool) -> None:
        text, self._stream = ",".join(self._stream), []
        self.file.save(text, to_index_file=to_index_file)

    def answer(self) -> Answer:
        """Triton's settings answer: every value a string (the level a list), in its order."""
        settings: Answer = {
            "trace_level": self.level.names(),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
        }
        if self.mode is TraceMode.TRITON:
            settings["log_frequency"] = str(self.log_frequency)
            settings["trace_file"] = self.file.name
        settings["trace_mode"] = self.mode.value
        for key, value in self.options:
            settings[key] = value
        return settings


class TraceSettings:
    """The server's settings: the command line's (the global default), the global one, the models' own."""

    def __init__(self, config: TraceConfig, file: TraceFile, on_change: Callable[[], None]) -> None:
        self._file = file
        self._on_change = on_change  # told after each change (the manager recomputes whether any traces)
        self.default = self._new(config.level, config.rate, config.count, config.log_frequency, config)
        self.global_setting = self._new(config.level, config.rate, config.count, config.log_frequency, config)
        self.models: dict[str, TraceSetting] = {}
        self._mirroring: set[str] = set()  # models with a field that falls back on the global setting

    def _new(
        self, level: TraceLevel, rate: int, count: int, frequency: int, like: TraceConfig | TraceSetting
    ) -> TraceSetting:
        return TraceSetting(level, rate, count, frequency, self._file, like.mode, like.options)

    def of(self, model: str) -> TraceSetting:
        return self.models.get(model, self.global_setting)

    def all(self) -> list[TraceSetting]:
        return [self.global_setting, *self.models.values()]

    def update(self, model: str, changes: Changes) -> None:
        """Apply ``changes`` to ``model``'s setting ("" : the global one, and the models mirroring it)."""
        self._update_one(model, changes)
        if not model:
            for name in sorted(self._mirroring):
                self._update_one(name, {})
        self._on_change()

    def _update_one(self, model: str, changes: Changes) -> None:
        current = self.models.get(model) if model else self.global_setting
        fallback = self.global_setting if model else self.default
        values: dict[str, Any] = {name: getattr(fallback, name) for name in FIELDS}
        specified: set[str] = set()
        for name in FIELDS:
            change = changes.get(name)
            if change is CLEAR:
                continue
            if change is not None or (current is not None and name in current.specified):
                specified.add(name)
                values[name] = change if change is not None else getattr(current, name)
        if model:
            if not specified:  # nothing of its own left: the model uses the global setting
                self._mirroring.discard(model)
                old = self.models.pop(model, None)
                if old is not None:
                    old.retire()
                return
            # Triton's trace file is never the model's own, so some field always mirrors the global one.
            self._mirroring.add(model)
        setting = self._new(
            values["level"], values["rate"], values["count"], values["log_frequency"], fallback
        )
        setting.specified = frozenset(specified)
        reason = setting.invalid_reason
        if reason and setting.level != TraceLevel.OFF:
            raise InvalidArgumentError(f"Attempting to set invalid trace setting :{reason}")
        if current is not None:
            current.retire()
        if model:
            self.models[model] = setting
        else:
            self.global_setting = setting

    def retire_all(self) -> None:
        for setting in self.all():
            setting.retire()


# --- the API's changes, in Triton's words --------------------------------------------------------------


def _integer(key: str, text: str, *, http: bool) -> int:
    """``key``'s value as Triton's std::stoi reads it, its range and words (the HTTP and gRPC texts differ
    in one space)."""
    low, high = (-1, INT32_MAX) if key == "trace_count" else (0, UINT32_MAX)
    try:
        value = leading_int(text)
    except ValueError:
        raise InvalidArgumentError(f"Unable to parse '{key}', got: {text}") from None
    if not -(2**31) <= value <= INT32_MAX:
        raise InvalidArgumentError(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    if key == "trace_count":
        if value < -1:
            space = "" if http else " "
            raise InvalidArgumentError(
                f"Unable to parse 'trace_count'. Expecting value >= -1, got:{space}{text}"
            )
        return value
    return value & UINT32_MAX  # Triton's rate and log frequency are uint32


def _levels(names: list[object]) -> TraceLevel | None:
    level: TraceLevel | None = None
    for name in names:
        if not isinstance(name, str):
            msg = "attempt to access JSON non-string as string"
            raise InvalidArgumentError(msg)
        if name == "OFF":
            if len(names) != 1:
                msg = "Expect only one trace level 'OFF' is specified"
                raise InvalidArgumentError(msg)
            level = TraceLevel.OFF
        elif name in ("TIMESTAMPS", "TENSORS"):
            level = (level or TraceLevel.OFF) | TraceLevel[name]
        else:  # Triton ignores it; sonic does not leave a request's word unread (docs/triton-differences.md)
            raise InvalidArgumentError(f"unknown trace level {name!r}: expected OFF, TIMESTAMPS or TENSORS")
    return level


def changes_from_json(payload: Mapping[str, object]) -> Changes:
    """An HTTP body's changes, checked in Triton's order; keys it does not know change nothing, as in Triton."""
    if "trace_file" in payload:
        raise UnimplementedError(TRACE_FILE_REFUSED)
    changes: Changes = {}
    for key, name in KEYS.items():
        if key not in payload:
            continue
        value = payload[key]
        if value is None:
            changes[name] = CLEAR
        elif key == "trace_level":
            if not isinstance(value, list):
                msg = "attempt to access JSON non-array as array"
                raise InvalidArgumentError(msg)
            level = _levels(value)
            if level is not None:
                changes[name] = level
        elif not isinstance(value, str):
            msg = "attempt to access JSON non-string as string"
            raise InvalidArgumentError(msg)
        else:
            changes[name] = _integer(key, value, http=True)
    return changes


def changes_from_grpc(settings: Mapping[str, Any]) -> Changes:
    """A ``TraceSettingRequest``'s changes (its map of string lists), in Triton's order and words."""
    if "trace_file" in settings:
        raise UnimplementedError(TRACE_FILE_REFUSED)
    changes: Changes = {}
    for key, name in KEYS.items():
        if key not in settings:
            continue
        values = list(settings[key].value)
        if not values:
            changes[name] = CLEAR
        elif key == "trace_level":
            level = _levels(list(values))
            if level is not None:
                changes[name] = level
        elif len(values) > 1:
            raise InvalidArgumentError(f"expect only 1 value for '{key}'")
        else:
            changes[name] = _integer(key, values[0], http=False)
    return changes


def answer_to_grpc(answer: Answer, response: Any) -> Any:
    """Fill a ``TraceSettingResponse``'s map: each value a list of strings."""
    for key, value in answer.items():
        response.settings[key].value.extend(value if isinstance(value, list) else [value])
    return response
