"""Triton's trace settings as the command line gives them: ``--trace-config`` and the deprecated ``--trace-*``.

Parsed as ``tritonserver`` 2.51 parses them (its ``command_line_parser.cc``): ``--trace-config
<setting>=<value>`` sets a global setting (``level``, ``rate``, ``count``, ``mode``), ``--trace-config
triton,<setting>=<value>`` a setting of Triton's own trace files (``file``, ``log-frequency``) and
``--trace-config opentelemetry,<setting>=<value>`` one of the OpenTelemetry exporter (``url``,
``resource``, ``bsp_*``). A ``--trace-config`` value wins over the deprecated flag it replaces; levels
accumulate (``TIMESTAMPS`` and ``TENSORS``), and an ``OFF`` anywhere turns tracing off. Errors are Triton's
words. Settings Triton does not know are kept, as Triton keeps them (its settings answer lists them), and
the caller warns about them: they change nothing.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
# std::stoi / std::stoul: leading C whitespace, a sign, digits; what follows the digits is ignored.
_LEADING_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
# The OpenTelemetry batch span processor's settings, with Triton's defaults (each read from the
# environment variable OTEL_<NAME> first, as Triton does).
BSP_DEFAULTS = {
    "bsp_max_queue_size": "2048",
    "bsp_schedule_delay": "5000",
    "bsp_max_export_batch_size": "512",
}
KNOWN_SETTINGS = {
    "": ("level", "rate", "count", "mode"),
    "triton": ("file", "log-frequency"),
    "opentelemetry": ("url", "resource", *BSP_DEFAULTS),
}


class TraceLevel(enum.IntFlag):
    """Triton's ``TRITONSERVER_InferenceTraceLevel`` bits (MIN and MAX, deprecated, mean TIMESTAMPS)."""

    OFF = 0
    TIMESTAMPS = 0x4
    TENSORS = 0x8

    def names(self) -> list[str]:
        """As the settings API lists them: ``["OFF"]``, or ``TIMESTAMPS`` then ``TENSORS``."""
        if not self:
            return ["OFF"]
        return [level.name or "" for level in (TraceLevel.TIMESTAMPS, TraceLevel.TENSORS) if level in self]


class TraceMode(enum.Enum):
    TRITON = "triton"
    OPENTELEMETRY = "opentelemetry"


class TraceFlagError(ValueError):
    """A trace flag Triton refuses, in its words."""


@dataclass(frozen=True)
class TraceConfig:
    """The trace settings a server starts with (Triton's defaults: off, rate 1000, no count limit)."""

    level: TraceLevel = TraceLevel.OFF
    rate: int = 1000  # every rate-th request is traced (0: none)
    count: int = -1  # how many traces in all (-1: no limit)
    log_frequency: int = 0  # traces per numbered file (0: one file, written as traces complete)
    file: str = ""  # Triton mode's trace file ("" : none, so Triton mode traces nothing)
    mode: TraceMode = TraceMode.TRITON
    # The mode's other --trace-config settings in the order given (OpenTelemetry's: url, resource, bsp_*);
    # the settings API answers them as Triton does.
    options: tuple[tuple[str, str], ...] = field(default=())

    def option(self, key: str, default: str = "") -> str:
        return next((value for name, value in self.options if name == key), default)


def leading_int(text: str) -> int:
    """``std::stoi``/``stoul``'s reading of ``text``: ValueError when no digits lead it (after spaces)."""
    match = _LEADING_INTEGER.match(text)
    if match is None:
        raise ValueError(text)
    return int(match.group(1))


def _option_int(text: str, low: int, high: int) -> int:
    """Triton's ParseOption<int32/uint32>, its words."""
    try:
        value = leading_int(text)
    except ValueError:
        raise TraceFlagError(f"Invalid option value. Got {text}") from None
    if not low <= value <= high:
        raise TraceFlagError(f"Provided option value is out of bound. Got {text}")
    return value


def parse_level(text: str) -> TraceLevel:
    lowered = text.lower()
    if lowered in ("false", "off"):
        return TraceLevel.OFF
    if lowered in ("true", "on", "min", "max", "timestamps"):
        return TraceLevel.TIMESTAMPS
    if lowered == "tensors":
        return TraceLevel.TENSORS
    raise TraceFlagError(f"invalid value for trace level option: {text}")


def parse_mode(text: str) -> TraceMode:
    try:
        return TraceMode(text.lower())
    except ValueError:
        raise TraceFlagError(
            f'invalid value for trace mode option: {text}. Available options are "triton" and "opentelemetry"'
        ) from None


def split_trace_config(arg: str) -> tuple[str, str, str]:
    """One ``--trace-config`` value as (mode or "" for a global setting, setting, value)."""
    comma = arg.find(",")
    mode = ""
    if comma > 0:
        mode = parse_mode(arg[:comma]).value
    elif comma == 0:
        raise TraceFlagError(
            "No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> or "
            f"<setting>=<value>. Got {arg}"
        )
    equals = arg.find("=", comma + 1)
    setting, value = arg[comma + 1 : equals], arg[equals + 1 :]
    if equals < 0 or not setting or not value:
        raise TraceFlagError(f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}")
    return mode, setting, value


@dataclass(frozen=True)
class TraceFlags:
    """The trace flags as given: each ``--trace-config`` value, and the deprecated flags (None: not given)."""

    trace_config: Sequence[str] = ()
    trace_file: str | None = None
    trace_level: Sequence[str] = ()
    trace_rate: str | None = None
    trace_count: str | None = None
    trace_log_frequency: str | None = None


def _bad(setting: str, error: TraceFlagError) -> TraceFlagError:
    return TraceFlagError(f'Bad option: "--trace-config {setting}".\n{error}')


def parse_trace_flags(
    flags: TraceFlags, environ: dict[str, str] | None = None
) -> tuple[TraceConfig, list[str]]:
    """The configuration the flags ask for, and the notices Triton prints (deprecations, overrides, unknown
    settings). Raises :class:`TraceFlagError` where Triton refuses to start."""
    environ = dict(os.environ) if environ is None else environ
    notices: list[str] = []
    level, disabled = TraceLevel.OFF, False
    for text in flags.trace_level:
        parsed = parse_level(text)
        level, disabled = level | parsed, disabled or parsed == TraceLevel.OFF
    rate = _option_int(flags.trace_rate, -(2**31), INT32_MAX) if flags.trace_rate is not None else 1000
    count = _option_int(flags.trace_count, -(2**31), INT32_MAX) if flags.trace_count is not None else -1
    frequency = flags.trace_log_frequency
    log_frequency = _option_int(frequency, -(2**31), INT32_MAX) if frequency is not None else 0
    for flag, given in (
        ("--trace-file", flags.trace_file is not None),
        ("--trace-level", bool(flags.trace_level)),
        ("--trace-rate", flags.trace_rate is not None),
        ("--trace-count", flags.trace_count is not None),
        ("--trace-log-frequency", flags.trace_log_frequency is not None),
    ):
        if given:
            notices.append(f"'{flag}' has been deprecated and will be replaced by '--trace-config'")
    settings: dict[str, list[tuple[str, str]]] = {"": [], "triton": [], "opentelemetry": []}
    for arg in flags.trace_config:
        mode_name, setting, value = split_trace_config(arg)
        settings[mode_name].append((setting, value))
        if setting not in KNOWN_SETTINGS[mode_name]:
            where = f"{mode_name}," if mode_name else ""
            notices.append(
                f"--trace-config {where}{setting}={value}: Triton knows no such setting; it changes nothing"
            )
    mode = TraceMode.TRITON
    for setting, value in settings[""]:
        try:
            if setting == "rate":
                rate = _option_int(value, -(2**31), INT32_MAX)
            elif setting == "level":
                parsed = parse_level(value)
                level, disabled = level | parsed, disabled or parsed == TraceLevel.OFF
            elif setting == "mode":
                mode = parse_mode(value)
            elif setting == "count":
                count = _option_int(value, -(2**31), INT32_MAX)
        except TraceFlagError as exc:
            raise _bad(setting, exc) from None
    file = flags.trace_file or ""
    options: list[tuple[str, str]] = []
    if mode is TraceMode.TRITON:
        for setting, value in settings["triton"]:
            try:
                if setting == "file":
                    file = value
                elif setting == "log-frequency":
                    log_frequency = _option_int(value, -(2**31), INT32_MAX)
            except TraceFlagError as exc:
                raise _bad(f"triton,{setting}", exc) from None
        options = [(k, v) for k, v in settings["triton"] if k not in ("file", "log-frequency")]
    else:
        options = _opentelemetry_options(settings["opentelemetry"], environ)
    if disabled:
        level = TraceLevel.OFF
    config = TraceConfig(
        level=level,
        rate=rate & UINT32_MAX,  # Triton keeps rate and log frequency as uint32
        count=count,
        log_frequency=log_frequency & UINT32_MAX,
        file=file,
        mode=mode,
        options=tuple(options),
    )
    return config, notices


def _opentelemetry_options(given: list[tuple[str, str]], environ: dict[str, str]) -> list[tuple[str, str]]:
    """The OpenTelemetry settings with the batch span processor's defaults added, its numbers checked."""
    options: list[tuple[str, str]] = []
    for setting, text in given:
        value = text
        if setting in BSP_DEFAULTS:
            try:
                value = str(_option_int(text, 0, UINT32_MAX))
            except TraceFlagError as exc:
                raise _bad(f"opentelemetry,{setting}", exc) from None
        options.append((setting, value))
    for setting, default in BSP_DEFAULTS.items():
        if all(name != setting for name, _ in given):
            value = environ.get(f"OTEL_{setting.upper()}", default)
            try:
                options.append((setting, str(_option_int(value, 0, UINT32_MAX))))
            except TraceFlagError as exc:
                raise TraceFlagError(f'Bad option: "OTEL_{setting.upper()}".\n{exc}') from None
    _check_batching(options)
    return options


def _check_batching(options: list[tuple[str, str]]) -> None:
    """Refuse the batch settings the SDK's batch span processor cannot follow (Triton hands them to
    opentelemetry-cpp unchecked): a zero. A batch size above the queue size is no refusal: no batch can
    hold more than the queue, so the exporter uses the queue size (the same batches)."""
    for name, value in options:
        if name in BSP_DEFAULTS and int(value) == 0:
            raise TraceFlagError(
                f"opentelemetry,{name}=0 (--trace-config or OTEL_{name.upper()}): sonic cannot honour it; "
                "its batch span processor needs a positive number"
            )
