"""``pb_utils.Logger`` and ``LogLevel``: a Python model's messages go to the server's log."""

from __future__ import annotations

import enum
import logging

log = logging.getLogger("sonic.python_model")


class LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_LEVELS = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


class Logger:
    """``pb_utils.Logger``: model messages go to the server's log."""

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        log.log(_LEVELS[LogLevel(level)], "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        log.debug("%s", message)
