"""``sonic serve`` takes tritonserver's flags: implemented ones map to sonic's settings, others are
noticed or refused as the table in :mod:`sonic.cli.triton_flags` says."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from sonic.cli.main import build_parser
from sonic.cli.serve import config_from_args, log_settings_from_args
from sonic.cli.triton_flags import TRITON_FLAGS, TritonSettings, apply_triton_flags
from sonic.logs import LogSettings
from sonic.server.config import BackendOptions, RateLimitConfig, ServerConfig
from sonic.server.runtime.rate_limiter import ResourceCount

pytestmark = pytest.mark.unit
log = logging.getLogger("test")


def _parse(*argv: str) -> tuple[argparse.Namespace, TritonSettings]:
    args = build_parser().parse_args(["serve", *argv])
    return args, apply_triton_flags(args, log)


def _config(*argv: str) -> ServerConfig:
    args, settings = _parse(*argv)
    return config_from_args(args, settings)


def test_cmstriton_style_command_line_is_accepted(tmp_path: Path) -> None:
    config = _config(
        f"--model-repository={tmp_path}",
        "--http-port=8100",
        "--grpc-port",
        "8101",
        "--metrics-port=8102",
        "--log-verbose=1",
        "--log-error=1",
        "--log-warning=1",
        "--log-info=1",
        "--strict-model-config=false",
        "--allow-gpu-metrics",
        "--exit-on-error=true",
        "--backend-config=onnxruntime,enable-global-threadpool=1",
        "--backend-config=default-max-batch-size=8",
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-memory-pool-byte-size=0:67108864",
        "--id=site-a",
        "--grpc-infer-allocation-pool-size=16",
    )
    assert (config.http.port, config.grpc.port, config.metrics.port) == (8100, 8101, 8102)
    assert config.model_repositories == (tmp_path,)
    assert config.exit_on_error
    assert config.auto_complete_config
    assert config.server_name == "site-a"
    assert config.backend_options == BackendOptions(
        {"default-max-batch-size": "8"}, {"onnxruntime": {"enable-global-threadpool": "1"}}
    )


def test_logging_flags_set_the_level(tmp_path: Path) -> None:
    assert _parse(f"--model-repository={tmp_path}", "--log-verbose", "1")[1].log_level == "DEBUG"
    assert _parse(f"--model-repository={tmp_path}", "--log-info=false")[1].log_level == "WARNING"
    assert _parse(f"--model-repository={tmp_path}", "--log-info=true")[1].log_level is None


def test_logging_flags_are_tritons_independent_switches(tmp_path: Path) -> None:
    args, triton = _parse(f"--model-repository={tmp_path}", "--log-warning=false", "--log-verbose=3")
    settings = log_settings_from_args(args, triton)
    assert settings == LogSettings(log_warning=False, log_verbose_level=3)
    args = build_parser().parse_args(
        ["--log-level", "WARNING", "serve", f"--model-repository={tmp_path}", "--log-format=ISO8601"]
    )
    assert log_settings_from_args(args, apply_triton_flags(args, log)) == LogSettings(
        log_info=False, log_format="ISO8601"
    )
    args, triton = _parse(f"--model-repository={tmp_path}", "--log-verbose=-1")
    with pytest.raises(ValueError, match="--log-verbose=-1: expected an integer >= 0"):
        log_settings_from_args(args, triton)


def test_auto_complete_switches(tmp_path: Path) -> None:
    assert not _config(f"--model-repository={tmp_path}", "--strict-model-config=true").auto_complete_config
    assert not _config(
        f"--model-repository={tmp_path}", "--disable-auto-complete-config"
    ).auto_complete_config


def test_allow_flags_and_addresses(tmp_path: Path) -> None:
    config = _config(
        f"--model-store={tmp_path}", "--allow-http=true", "--allow-metrics", "--grpc-address=0.0.0.0"
    )
    assert (config.http.port, config.metrics.port, config.host) == (8000, 8002, "0.0.0.0")
    config = _config(f"--model-repository={tmp_path}", "--http-port=9000", "--allow-http=false")
    assert config.http.port is None
    with pytest.raises(ValueError, match="one address"):
        _parse(f"--model-repository={tmp_path}", "--grpc-address=0.0.0.0", "--http-address=127.0.0.1")


def test_cache_and_keepalive_flags(tmp_path: Path) -> None:
    config = _config(f"--model-repository={tmp_path}", "--cache-config=local,size=1048576")
    assert config.cache_size_bytes == 1 << 20
    config = _config(f"--model-repository={tmp_path}", "--grpc-keepalive-time=20000")
    assert config.grpc.http2_limits.keepalive_interval_s == 20.0


def test_header_forward_patterns_reach_the_config(tmp_path: Path) -> None:
    flags = ("--grpc-header-forward-pattern=my_.*", "--http-header-forward-pattern=x")
    config = _config(f"--model-repository={tmp_path}", *flags)
    assert (config.grpc.header_forward_pattern, config.http.header_forward_pattern) == ("my_.*", "x")
    with pytest.raises(ValueError, match=r"--http-header-forward-pattern=a\(: not a regular expression"):
        _config(f"--model-repository={tmp_path}", "--http-header-forward-pattern=a(")


@pytest.mark.parametrize(
    "flag",
    ["--model-config-name=other", "--allow-grpc=false", "--model-namespacing=true"],
)
def test_flags_we_cannot_honour_are_refused(tmp_path: Path, flag: str) -> None:
    with pytest.raises(ValueError, match="is not supported by sonic serve"):
        _parse(f"--model-repository={tmp_path}", flag)


def test_rate_limit_flags_map_to_the_rate_limiter(tmp_path: Path) -> None:
    config = _config(f"--model-repository={tmp_path}")
    assert config.rate_limit is None
    config = _config(
        f"--model-repository={tmp_path}",
        "--rate-limit=execution_count",
        "--rate-limit-resource=R1:10",
        "--rate-limit-resource=R2:5:0",
    )
    assert config.rate_limit == RateLimitConfig((ResourceCount("R1", 10), ResourceCount("R2", 5, 0)))
    # Off (Triton's default): resources given are ignored with the rate_limiter sections.
    assert (
        _config(f"--model-repository={tmp_path}", "--rate-limit=off", "--rate-limit-resource=R:1").rate_limit
        is None
    )
    with pytest.raises(ValueError, match="expected execution_count or off"):
        _parse(f"--model-repository={tmp_path}", "--rate-limit=sometimes")


def test_harmless_values_of_refused_flags_pass(tmp_path: Path) -> None:
    _parse(f"--model-repository={tmp_path}", "--allow-grpc=true", "--allow-sagemaker=false")


def test_noticed_flags_log_one_line_each(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _parse(f"--model-repository={tmp_path}", "--allow-gpu-metrics=false", "--backend-directory=/opt/b")
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 2
    assert all("accepted, no effect here" in n for n in notices)


def test_bad_boolean_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected a boolean"):
        _parse(f"--model-repository={tmp_path}", "--exit-on-error=maybe")


def test_every_flag_of_the_table_parses(tmp_path: Path) -> None:
    for flag, spec in TRITON_FLAGS.items():
        args = build_parser().parse_args(
            ["serve", f"--model-repository={tmp_path}", flag] + ([] if spec.value == "none" else ["1"])
        )
        assert args is not None


def test_no_repository_is_an_error() -> None:
    args, settings = _parse()
    with pytest.raises(ValueError, match="--model-repository"):
        config_from_args(args, settings)


def test_exit_on_error_and_strict_readiness_default_to_tritons_true(tmp_path: Path) -> None:
    # A site's Triton command line works unchanged: no flag means what it means to Triton.
    config = _config(f"--model-repository={tmp_path}")
    assert config.exit_on_error
    assert config.strict_readiness
    assert ServerConfig(model_repositories=(tmp_path,)).exit_on_error  # the library's default too
    lenient = _config(f"--model-repository={tmp_path}", "--exit-on-error=false", "--strict-readiness", "0")
    assert not lenient.exit_on_error
    assert not lenient.strict_readiness
    assert _config(f"--model-repository={tmp_path}", "--strict-readiness").strict_readiness


def test_model_links_are_followed_unless_refused(tmp_path: Path) -> None:
    assert _config(f"--model-repository={tmp_path}").security.allow_model_links_outside  # as Triton
    follow = _config(f"--model-repository={tmp_path}", "--allow-model-links-outside")
    assert follow.security.allow_model_links_outside
    strict = _config(f"--model-repository={tmp_path}", "--refuse-model-links-outside")
    assert not strict.security.allow_model_links_outside
    with pytest.raises(ValueError, match="opposite things"):
        _config(
            f"--model-repository={tmp_path}", "--refuse-model-links-outside", "--allow-model-links-outside"
        )
