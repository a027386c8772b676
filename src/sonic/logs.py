"""Log set-up for ``sonic``: plain text for people, one JSON object per line for log shippers.

Structured fields travel in ``extra=`` (``request_id``, ``model``, ``version``, ``status``,
``duration_us``); the JSON formatter writes every such field, the text formatter appends them as
``key=value`` so request ids are in both. :class:`LogSettings` are Triton's switches (``--log-info``,
``--log-verbose``, ...), which :class:`LogControl` applies at start and whenever the log-settings API
(``/v2/logging``, gRPC ``LogSettings``) changes them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="microseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        payload.update(_extras(record))
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = _extras(record)
        if extras:
            text += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return text


class IsoTextFormatter(TextFormatter):
    """The text format with Triton's ISO8601 time stamp (``2024-01-01T12:00:00Z``, UTC)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        del datefmt
        return dt.datetime.fromtimestamp(record.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Triton's two log formats, and sonic's own JSON lines.
LOG_FORMATS = ("default", "ISO8601", "json")
MAX_VERBOSE_LEVEL = (1 << 32) - 1  # log_verbose_level is a uint32 on the wire


@dataclass(frozen=True)
class LogSettings:
    """Triton's log settings, as ``tritonserver --log-*`` sets them and the log-settings API reads them.

    The three levels are independent switches, as in Triton (``log_info=false`` hides INFO records and
    nothing else; CRITICAL counts as an error); any ``log_verbose_level`` above 0 shows DEBUG records.
    """

    log_file: str = ""  # "" : stderr
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"  # one of LOG_FORMATS

    def __post_init__(self) -> None:
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")
        if not 0 <= self.log_verbose_level <= MAX_VERBOSE_LEVEL:
            raise ValueError(
                f"log verbose level must be in 0..{MAX_VERBOSE_LEVEL}, got {self.log_verbose_level}"
            )

    @classmethod
    def from_level(cls, level: str, log_format: str = "default", log_file: str = "") -> LogSettings:
        """``sonic --log-level LEVEL`` as these switches (``text`` is the default format)."""
        number = logging.getLevelName(level)
        return cls(
            log_file=log_file,
            log_info=number <= logging.INFO,
            log_warning=number <= logging.WARNING,
            log_error=number <= logging.ERROR,
            log_verbose_level=1 if number <= logging.DEBUG else 0,
            log_format="default" if log_format == "text" else log_format,
        )

    def allows(self, levelno: int) -> bool:
        if levelno >= logging.ERROR:
            return self.log_error
        if levelno >= logging.WARNING:
            return self.log_warning
        if levelno >= logging.INFO:
            return self.log_info
        return self.log_verbose_level > 0

    @property
    def lowest_level(self) -> int:
        """The logger level: records below it are not even made (the cheap check of ``isEnabledFor``)."""
        for level, on in (
            (logging.DEBUG, self.log_verbose_level > 0),
            (logging.INFO, self.log_info),
            (logging.WARNING, self.log_warning),
            (logging.ERROR, self.log_error),
        ):
            if on:
                return level
        return logging.CRITICAL + 1


def _formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    return IsoTextFormatter() if log_format == "ISO8601" else TextFormatter()


class LogControl:
    """The log settings in force and what follows them: the level of ``logger``, and the format and the
    level switches of ``handler`` (the process's one log handler, when this process installed it)."""

    def __init__(
        self, settings: LogSettings, handler: logging.Handler | None, logger: logging.Logger
    ) -> None:
        self._settings = settings
        self._handler = handler
        self._logger = logger
        if handler is not None:
            handler.addFilter(self._allows)
            self._apply()

    @classmethod
    def install(cls, settings: LogSettings) -> LogControl:
        """Send every record to stderr, or appended to ``settings.log_file``, following ``settings``."""
        handler: logging.Handler = (
            logging.FileHandler(settings.log_file, encoding="utf-8")
            if settings.log_file
            else logging.StreamHandler(sys.stderr)
        )
        logging.basicConfig(handlers=[handler], force=True)
        return cls(settings, handler, logging.getLogger())

    @classmethod
    def in_process(cls) -> LogControl:
        """For a server inside another program: only the ``sonic`` loggers' level follows the settings, once
        the API changes them; the program's handlers (so the format and the per-level switches) stay its own."""
        return cls(LogSettings(), None, logging.getLogger("sonic"))

    @property
    def settings(self) -> LogSettings:
        return self._settings

    def update(self, settings: LogSettings) -> None:
        self._settings = settings
        self._apply()

    def _allows(self, record: logging.LogRecord) -> bool:
        return self._settings.allows(record.levelno)

    def _apply(self) -> None:
        self._logger.setLevel(self._settings.lowest_level)
        if self._handler is not None:
            self._handler.setFormatter(_formatter(self._settings.log_format))


def configure_logging(level: str, log_format: str, path: Path | None = None) -> LogControl:
    """Log records at ``level`` and up to stderr, or appended to the file at ``path``."""
    if log_format not in {"text", "json"}:
        raise ValueError(f"log format must be 'text' or 'json', got {log_format!r}")
    return LogControl.install(
        LogSettings.from_level(level, log_format, str(path) if path is not None else "")
    )
