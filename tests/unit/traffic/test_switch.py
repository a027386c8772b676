"""Recording switched on and off: ``--traffic-log-start``, and starts and stops taken one at a time, each
stop leaving whole files behind (the real writer, in a temporary folder)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sonic.cli.main import build_parser
from sonic.cli.serve_traffic import traffic_config_from_args
from sonic.protocol.types import InferRequest
from sonic.server.traffic.rows import request_row
from sonic.server.traffic.switch import TrafficSwitch
from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.schema import PARTIAL_SUFFIX, read_traffic

pytestmark = pytest.mark.unit


def test_traffic_log_start_off_names_the_folder_without_recording(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--traffic-log", str(tmp_path), "--traffic-log-start", "off"])
    config = traffic_config_from_args(args)
    assert config is not None
    assert not config.enabled
    args = build_parser().parse_args(["serve", "--traffic-log-start", "off"])
    with pytest.raises(ValueError, match="--traffic-log-start off needs --traffic-log DIR"):
        traffic_config_from_args(args)


def test_concurrent_switches_open_one_recording_and_a_stop_leaves_whole_files(tmp_path: Path) -> None:
    folder = tmp_path / "traffic"
    switch = TrafficSwitch(TrafficLogConfig(folder, enabled=False, flush_interval_s=3600))

    async def scenario() -> None:
        await switch.start()
        states = [switch.recording]
        switch.record(request_row(InferRequest("m", "", []), 1, 1, None, 10))  # off: dropped
        await asyncio.gather(switch.set_recording(True), switch.set_recording(True))
        states.append(switch.recording)
        switch.record(request_row(InferRequest("m", "", [], request_id="kept"), 1, 1, None, 10))
        await asyncio.gather(switch.set_recording(False), switch.set_recording(False))
        states.append(switch.recording)
        assert states == [False, True, False]
        await switch.close()

    asyncio.run(scenario())  # the stops wake the writer at once: no wait for its hour-long flush interval
    assert not list(folder.glob(f"*/*{PARTIAL_SUFFIX}"))
    assert read_traffic(folder).column("request_id").to_pylist() == ["kept"]
