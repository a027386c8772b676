"""``--loop`` of ``sonic serve`` and ``sonic perf``: uvloop when installed, the standard loop on request."""

from __future__ import annotations

import sys

import pytest
import uvloop

from sonic.cli.event_loop import loop_factory
from sonic.cli.main import build_parser

pytestmark = pytest.mark.unit


def test_auto_and_uvloop_pick_uvloop_and_asyncio_the_standard_loop() -> None:
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "uvloop", None
    )  # an import of it now fails, as where it is not installed
    assert loop_factory("auto") is None
    with pytest.raises(ImportError, match="--loop uvloop needs uvloop"):
        loop_factory("uvloop")


@pytest.mark.parametrize("command", [["serve", "--model-repository", "x"], ["perf", "-m", "identity"]])
def test_serve_and_perf_take_the_same_choices(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(command).loop == "auto"
    assert parser.parse_args([*command, "--loop", "asyncio"]).loop == "asyncio"
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--loop", "trio"])
    assert "invalid choice: 'trio'" in capsys.readouterr().err
