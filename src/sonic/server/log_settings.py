"""Triton's log-settings API (HTTP ``GET``/``POST /v2/logging``, gRPC ``LogSettings``), transport-neutral.

Read: the settings in force, in Triton's key order (``log_file``, ``log_info``, ``log_warning``,
``log_error``, ``log_verbose_level``, ``log_format``), plus sonic's ``traffic_log`` when the server was
started with a traffic-log directory. Update: only the keys given change, as in Triton 2.51: keys it does
not know are ignored, ``log_file`` is refused (UNIMPLEMENTED: a caller of the API never chooses a path),
a value of the wrong type is INVALID_ARGUMENT with Triton's gRPC words (its HTTP front end answers 500
there; sonic 400, see docs/triton-differences.md). Unlike Triton, an update is checked whole before
anything changes, so a refused request changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Protocol, cast

from sonic.logs import LOG_FORMATS, MAX_VERBOSE_LEVEL, LogControl
from sonic.protocol.errors import InvalidArgumentError, UnimplementedError

log = logging.getLogger(__name__)

Setting = bool | int | str
BOOL_KEYS = ("log_info", "log_warning", "log_error")
TRAFFIC_KEY = "traffic_log"  # sonic's own: recording the traffic log on or off (docs/perf.md)
# What each key takes, in the words of Triton's gRPC errors (which say int32 for a uint32).
_EXPECTED = {"log_verbose_level": "int32", "log_format": "string", TRAFFIC_KEY: "boolean"} | dict.fromkeys(
    BOOL_KEYS, "boolean"
)
NO_TRAFFIC_DIRECTORY = (
    "traffic_log: this server has no traffic-log directory; start sonic serve with --traffic-log DIR "
    "(and --traffic-log-start off to record only when asked)"
)
LOG_FILE_REFUSED = "log file location can not be updated through network protocol"


class TrafficSwitch(Protocol):
    """What the API needs of the traffic recorder (:class:`sonic.server.traffic.switch.TrafficSwitch`)."""

    @property
    def recording(self) -> bool: ...

    async def set_recording(self, on: bool) -> None: ...


def _shown(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


def check_changes(changes: Mapping[str, object], *, traffic: bool) -> dict[str, Setting]:
    """The known keys of ``changes`` with values of their types; raise the error Triton answers, else.

    ``traffic``: whether the server has a traffic-log directory (``traffic_log`` is refused without).
    A None value (JSON null, a gRPC value with no field set) is checked by the caller's protocol.
    """
    if "log_file" in changes:
        raise UnimplementedError(LOG_FILE_REFUSED)
    checked: dict[str, Setting] = {}
    for key, value in changes.items():
        expected = _EXPECTED.get(key)
        if expected is None:
            continue  # as Triton: keys it does not know change nothing
        if expected == "boolean":
            ok = isinstance(value, bool)
        elif expected == "int32":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VERBOSE_LEVEL
        else:
            ok = isinstance(value, str)
        if not ok:
            raise InvalidArgumentError(f"expect {expected} for '{key}', got {_shown(value)}")
        if key == "log_format" and value not in LOG_FORMATS:
            raise InvalidArgumentError(
                f"invalid argument for log_format, got: {value} (expected default or ISO8601, or sonic's json)"
            )
        if key == TRAFFIC_KEY and not traffic:
            raise InvalidArgumentError(NO_TRAFFIC_DIRECTORY)
        checked[key] = cast("Setting", value)  # its type checked above
    return checked


class LogSettingsService:
    """The settings of one server: its log control and, when configured, its traffic recorder."""

    def __init__(self, control: LogControl, traffic: TrafficSwitch | None = None) -> None:
        self.control = control
        self.traffic = traffic

    def current(self) -> dict[str, Setting]:
        settings: dict[str, Setting] = dataclasses.asdict(self.control.settings)
        if self.traffic is not None:
            settings[TRAFFIC_KEY] = self.traffic.recording
        return settings

    async def update(self, changes: Mapping[str, object]) -> dict[str, Setting]:
        """Apply ``changes`` (checked whole first) and return the settings then in force."""
        # The keys as reprs: a client's key is any string, and a newline in it must not forge a log line.
        log.debug("log settings asked to change: %s", ", ".join(map(repr, changes)) or "nothing")
        checked = check_changes(changes, traffic=self.traffic is not None)
        recording = checked.pop(TRAFFIC_KEY, None)
        if recording is not None and self.traffic is not None:
            await self.traffic.set_recording(bool(recording))
        if checked:
            self.control.update(dataclasses.replace(self.control.settings, **checked))  # type: ignore[arg-type]
            log.info("log settings changed: %s", ", ".join(f"{k}={v}" for k, v in checked.items()))
        return self.current()


def changes_from_json(payload: dict[str, Any]) -> dict[str, object]:
    """An HTTP request's changes: a JSON null leaves its key as it is, ``log_file`` included (as Triton:
    any other ``log_file`` value is refused)."""
    return {key: value for key, value in payload.items() if value is not None}


def changes_from_grpc(request: Any) -> dict[str, object]:
    """A ``LogSettingsRequest``'s changes: each value's set field (None when none is set: refused)."""
    changes: dict[str, object] = {}
    for key, value in request.settings.items():
        which = value.WhichOneof("parameter_choice")
        changes[key] = getattr(value, which) if which else None
    return changes


def settings_to_grpc(settings: Mapping[str, Setting], response: Any) -> Any:
    """Fill a ``LogSettingsResponse``'s map: booleans, the verbose level as uint32, strings."""
    for key, value in settings.items():
        entry = response.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        else:
            entry.string_param = value
    return response
