"""The log settings: Triton's switches on Python's logging, and the API's checks of a change."""

from __future__ import annotations

import asyncio
import io
import logging
import re

import pytest
from tritonclient.grpc import service_pb2

from sonic.logs import LogControl, LogSettings
from sonic.protocol.errors import InvalidArgumentError, UnimplementedError
from sonic.server.log_settings import (
    LogSettingsService,
    changes_from_grpc,
    changes_from_json,
    check_changes,
    settings_to_grpc,
)

pytestmark = pytest.mark.unit


def test_the_three_levels_are_independent_switches() -> None:
    settings = LogSettings(log_info=False)
    assert not settings.allows(logging.INFO)
    assert settings.allows(logging.WARNING)
    assert settings.allows(logging.ERROR)
    assert settings.lowest_level == logging.WARNING
    only_info = LogSettings(log_warning=False)
    assert only_info.allows(logging.INFO)
    assert not only_info.allows(logging.WARNING)
    assert LogSettings(log_verbose_level=3).lowest_level == logging.DEBUG
    assert not LogSettings().allows(logging.DEBUG)
    assert LogSettings.from_level("WARNING") == LogSettings(log_info=False)
    with pytest.raises(ValueError, match="log format must be one of default, ISO8601, json"):
        LogSettings(log_format="xml")


def test_a_control_applies_format_and_switches_to_its_handler() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("sonic.test_log_settings")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        control = LogControl(LogSettings(), handler, logger)
        logger.info("first")
        logger.debug("hidden")
        control.update(LogSettings(log_info=False, log_verbose_level=1, log_format="ISO8601"))
        logger.info("second")
        logger.debug("shown")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["first", "shown"]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ DEBUG ", lines[1])


def test_check_changes_answers_as_triton() -> None:
    assert check_changes({"log_info": False, "unknown": 1}, traffic=False) == {"log_info": False}
    with pytest.raises(UnimplementedError, match="log file location can not be updated"):
        check_changes({"log_file": ""}, traffic=False)
    with pytest.raises(InvalidArgumentError, match="expect int32 for 'log_verbose_level', got bool True"):
        check_changes({"log_verbose_level": True}, traffic=False)
    with pytest.raises(
        InvalidArgumentError, match="expect int32 for 'log_verbose_level', got int 4294967296"
    ):
        check_changes({"log_verbose_level": 1 << 32}, traffic=False)
    with pytest.raises(InvalidArgumentError, match="invalid argument for log_format, got: xx"):
        check_changes({"log_format": "xx"}, traffic=False)
    with pytest.raises(InvalidArgumentError, match="expect boolean for 'log_error', got nothing"):
        check_changes({"log_error": None}, traffic=False)
    with pytest.raises(InvalidArgumentError, match="--traffic-log DIR"):
        check_changes({"traffic_log": True}, traffic=False)
    assert changes_from_json({"log_info": None, "log_error": False}) == {"log_error": False}


def test_grpc_messages_round_trip() -> None:
    request = service_pb2.LogSettingsRequest()
    request.settings["log_verbose_level"].uint32_param = 2
    request.settings["log_info"].bool_param = False
    request.settings["log_format"]  # a value with no field set: refused by the check
    assert changes_from_grpc(request) == {"log_verbose_level": 2, "log_info": False, "log_format": None}
    response = settings_to_grpc(
        {"log_file": "", "log_info": True, "log_verbose_level": 0}, service_pb2.LogSettingsResponse()
    )
    assert response.settings["log_file"].WhichOneof("parameter_choice") == "string_param"
    assert response.settings["log_info"].bool_param is True
    assert response.settings["log_verbose_level"].WhichOneof("parameter_choice") == "uint32_param"


def test_a_refused_update_changes_nothing() -> None:
    service = LogSettingsService(LogControl(LogSettings(), None, logging.getLogger("sonic.test_refused")))
    with pytest.raises(InvalidArgumentError):
        asyncio.run(service.update({"log_verbose_level": 1, "log_format": "xx"}))
    assert service.current()["log_verbose_level"] == 0
    assert asyncio.run(service.update({"log_verbose_level": 1}))["log_verbose_level"] == 1
    assert "traffic_log" not in service.current()


def test_a_clients_key_cannot_forge_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    service = LogSettingsService(LogControl(LogSettings(), None, logging.getLogger("sonic.test_forge")))
    with caplog.at_level(logging.DEBUG, logger="sonic.server.log_settings"):
        asyncio.run(service.update({"x\nERROR forged": 1}))
    assert "\n" not in caplog.text.strip()
    assert "'x\\nERROR forged'" in caplog.text
