"""Log set-up for ``sonic``: plain text for people, one JSON object per line for log shippers.

Structured fields travel in ``extra=`` (``request_id``, ``model``, ``version``, ``status``,
``duration_us``); the JSON formatter writes every such field, the text formatter appends them as
``key=value`` so request ids are in both.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
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


def configure_logging(level: str, log_format: str, path: Path | None = None) -> None:
    """Log records at ``level`` and up to stderr, or appended to the file at ``path``."""
    if log_format not in {"text", "json"}:
        raise ValueError(f"log format must be 'text' or 'json', got {log_format!r}")
    handler: logging.Handler = (
        logging.FileHandler(path, encoding="utf-8") if path is not None else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
