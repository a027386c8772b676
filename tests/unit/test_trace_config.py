"""Triton's trace flags on ``sonic serve``, parsed as tritonserver 2.51's command_line_parser.cc does."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from sonic.cli.main import build_parser
from sonic.cli.serve import config_from_args
from sonic.cli.triton_flags import apply_triton_flags
from sonic.server.trace.config import (
    TraceConfig,
    TraceFlagError,
    TraceFlags,
    TraceLevel,
    TraceMode,
    parse_trace_flags,
    split_trace_config,
)

pytestmark = pytest.mark.unit


def _parse(*trace_config: str, **deprecated: object) -> TraceConfig:
    config, _ = parse_trace_flags(TraceFlags(trace_config=trace_config, **deprecated), environ={})  # type: ignore[arg-type]
    return config


def test_no_flags_are_tritons_defaults() -> None:
    assert _parse() == TraceConfig(TraceLevel.OFF, 1000, -1, 0, "", TraceMode.TRITON, ())


def test_the_2_51_form() -> None:
    config = _parse(
        "level=TIMESTAMPS",
        "level=tensors",
        "rate=5",
        "count=10",
        "triton,file=/tmp/trace.json",
        "triton,log-frequency=50",
    )
    assert config.level == TraceLevel.TIMESTAMPS | TraceLevel.TENSORS
    assert (config.rate, config.count, config.log_frequency, config.file) == (5, 10, 50, "/tmp/trace.json")
    assert config.mode is TraceMode.TRITON


@pytest.mark.parametrize("word", ["true", "ON", "min", "max", "Timestamps"])
def test_tritons_synonyms_of_timestamps(word: str) -> None:
    assert _parse(f"level={word}").level == TraceLevel.TIMESTAMPS


def test_off_anywhere_turns_tracing_off() -> None:
    assert _parse("level=TIMESTAMPS", "level=OFF").level == TraceLevel.OFF
    assert _parse("level=TIMESTAMPS", trace_level=["false"]).level == TraceLevel.OFF


def test_deprecated_flags_and_the_config_that_overrides_them() -> None:
    config, notices = parse_trace_flags(
        TraceFlags(
            trace_config=["rate=7", "triton,file=/b"],
            trace_file="/a",
            trace_level=["TIMESTAMPS"],
            trace_rate="3",
            trace_count="4",
            trace_log_frequency="2",
        ),
        environ={},
    )
    assert (config.rate, config.file, config.count, config.log_frequency) == (7, "/b", 4, 2)
    assert config.level == TraceLevel.TIMESTAMPS
    assert sum("deprecated" in notice for notice in notices) == 5


def test_unknown_settings_are_kept_and_noticed() -> None:
    config, notices = parse_trace_flags(TraceFlags(trace_config=["triton,foo=bar", "color=red"]), environ={})
    assert config.options == (("foo", "bar"),)  # Triton answers it in the settings; the global one it drops
    assert len(notices) == 2


def test_opentelemetry_mode_has_the_batch_processor_defaults() -> None:
    config, _ = parse_trace_flags(
        TraceFlags(
            trace_config=[
                "mode=opentelemetry",
                "opentelemetry,url=http://collector:4318/v1/traces",
                "opentelemetry,resource=service.name=cms",
                "opentelemetry,bsp_max_queue_size=10",
                "triton,file=/ignored",
            ]
        ),
        environ={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    assert config.mode is TraceMode.OPENTELEMETRY
    assert config.file == ""
    assert dict(config.options) == {
        "url": "http://collector:4318/v1/traces",
        "resource": "service.name=cms",
        "bsp_max_queue_size": "10",
        "bsp_schedule_delay": "100",
        "bsp_max_export_batch_size": "512",
    }


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (",level=OFF", "No trace mode specified. --trace-config option format is"),
        ("level", "--trace-config option format is '<trace mode>,<setting>=<value>'. Got level"),
        ("level=", "--trace-config option format is '<trace mode>,<setting>=<value>'. Got level="),
        ("jaeger,url=x", 'invalid value for trace mode option: jaeger. Available options are "triton"'),
    ],
)
def test_malformed_config_values(arg: str, message: str) -> None:
    with pytest.raises(TraceFlagError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        split_trace_config(arg)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["level=LOUD"], 'Bad option: "--trace-config level".\ninvalid value for trace level option: LOUD'),
        (["rate=fast"], 'Bad option: "--trace-config rate".\nInvalid option value. Got fast'),
        (
            ["count=99999999999"],
            'Bad option: "--trace-config count".\nProvided option value is out of bound.',
        ),
        (["triton,log-frequency=x"], 'Bad option: "--trace-config triton,log-frequency".\nInvalid option'),
        (
            ["mode=opentelemetry", "opentelemetry,bsp_schedule_delay=-1"],
            'Bad option: "--trace-config opentelemetry,bsp_schedule_delay".\nProvided option value is out of bound',
        ),
    ],
)
def test_bad_values_are_refused_in_tritons_words(args: list[str], message: str) -> None:
    with pytest.raises(TraceFlagError) as error:
        _parse(*args)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("setting", ["bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size"])
def test_a_zero_batch_setting_is_refused(setting: str) -> None:
    """Triton hands a zero to opentelemetry-cpp; the SDK's batch processor cannot follow it
    (docs/triton-differences.md, otlp-export)."""
    message = f"opentelemetry,{setting}=0 (--trace-config or OTEL_{setting.upper()}): sonic cannot honour it"
    with pytest.raises(TraceFlagError, match=re.escape(message)):
        _parse("mode=opentelemetry", f"opentelemetry,{setting}=0")
    with pytest.raises(TraceFlagError, match=re.escape(message)):
        parse_trace_flags(
            TraceFlags(trace_config=["mode=opentelemetry"]), environ={f"OTEL_{setting.upper()}": "0"}
        )


def test_rate_reads_as_stoi_does() -> None:
    assert _parse("rate= 12abc").rate == 12
    assert _parse("rate=-1").rate == 2**32 - 1  # Triton keeps it as uint32


def test_serve_maps_the_flags(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            f"--model-repository={tmp_path}",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config",
            f"triton,file={tmp_path / 't.json'}",
            "--trace-rate=1",
            "--trace-level=TENSORS",
        ]
    )
    config = config_from_args(args, apply_triton_flags(args, logging.getLogger("test")))
    assert config.trace.level == TraceLevel.TIMESTAMPS | TraceLevel.TENSORS
    assert (config.trace.rate, config.trace.file) == (1, str(tmp_path / "t.json"))


def test_serve_refuses_what_triton_refuses(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}", "--trace-config=level=LOUD"])
    with pytest.raises(ValueError, match="invalid value for trace level option: LOUD"):
        apply_triton_flags(args, logging.getLogger("test"))
