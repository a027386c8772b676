"""``sonic serve``: run the inference server until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from sonic.cli import event_loop
from sonic.cli.serve_budget import add_budget_arguments, apply_malloc_threshold, budget_config_from_args
from sonic.cli.serve_grpc import add_grpc_arguments, grpc_config_from_args
from sonic.cli.serve_http import (
    add_http_arguments,
    add_metrics_arguments,
    http_config_from_args,
    metrics_config_from_args,
)
from sonic.cli.serve_security import add_security_arguments, security_config_from_args
from sonic.cli.serve_traffic import add_traffic_arguments, traffic_config_from_args
from sonic.cli.triton_flags import TritonSettings, add_triton_arguments, apply_triton_flags
from sonic.logs import LogControl, LogSettings, configure_logging
from sonic.protocol.errors import SonicError
from sonic.protocol.wire import MAX_MESSAGE_BYTES
from sonic.server.config import (
    BackendOptions,
    ModelControlMode,
    ServerConfig,
)
from sonic.server.devices import detect_gpu_count
from sonic.server.models.repository import StartFailure
from sonic.server.runtime.inline import DEFAULT_INLINE_EXECUTION_US
from sonic.server.server import Server, ShutdownSignals

log = logging.getLogger(__name__)


# Triton's words (TritonParser::ParseBackendConfigOption) for a --backend-config it cannot read.
BACKEND_CONFIG_NO_BACKEND = (
    "No backend specified. --backend-config option format is <backend name>,<setting>=<value> or "
    "<setting>=<value>. Got {}"
)
BACKEND_CONFIG_FORMAT = "--backend-config option format is '<backend name>,<setting>=<value>'. Got {}"


def parse_backend_config_option(value: str) -> tuple[str, str, str]:
    """One ``--backend-config``: (backend, setting, value), the backend "" for Triton's global form.

    Split as Triton splits it: the backend ends at the first comma, the setting at the first ``=``
    after it, the value is the rest (so ``a=1,b=2`` is backend ``a=1``). ValueError in Triton's words.
    """
    comma = value.find(",")
    equals = value.find("=", comma + 1)
    if comma == 0:
        raise ValueError(BACKEND_CONFIG_NO_BACKEND.format(value))
    if equals < 0:
        raise ValueError(BACKEND_CONFIG_FORMAT.format(value))
    setting, item = value[comma + 1 : equals], value[equals + 1 :]
    if not setting or not item:
        raise ValueError(BACKEND_CONFIG_FORMAT.format(value))
    return value[:comma] if comma > 0 else "", setting, item


def parse_backend_config(values: list[str]) -> BackendOptions:
    """Every ``--backend-config``, in order: the last of a repeated setting wins, as in Triton."""
    global_settings: dict[str, str] = {}
    per_backend: dict[str, dict[str, str]] = {}
    for value in values:
        backend, setting, item = parse_backend_config_option(value)
        settings = per_backend.setdefault(backend, {}) if backend else global_settings
        settings[setting] = item
    return BackendOptions(global_settings, per_backend)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("serve", help="run the KServe v2 / Triton-compatible inference server")
    parser.add_argument(
        "--model-repository", action="append", type=Path, help="model repository (repeatable, needed)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument(
        "--model-control-mode",
        choices=[m.value for m in ModelControlMode],
        default=ModelControlMode.NONE.value,
        help="none: load every model at start; explicit: only through the API and --load-model; "
        "poll: rescan the repository every --repository-poll-secs",
    )
    parser.add_argument(
        "--load-model", action="append", default=[], help="explicit mode: model to load at start ('*': all)"
    )
    parser.add_argument("--repository-poll-secs", type=float, default=15.0, help="poll mode: rescan period")
    parser.add_argument("--exit-timeout-secs", type=float, default=30.0, help="drain time at shutdown")
    parser.add_argument(
        "--backend-config",
        action="append",
        default=[],
        help="BACKEND,KEY=VALUE (e.g. onnxruntime,enable_mem_arena=0), or KEY=VALUE for every backend "
        "(e.g. default-max-batch-size=8: auto-completed max_batch_size; a backend's own setting wins)",
    )
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all that are detected)")
    event_loop.add_loop_argument(parser)
    _add_request_arguments(parser)
    add_grpc_arguments(parser)
    add_http_arguments(parser)
    add_metrics_arguments(parser)
    add_budget_arguments(parser)
    add_security_arguments(parser)
    add_traffic_arguments(parser)
    add_triton_arguments(parser)
    parser.set_defaults(run=run, server_name="triton")  # --id, as Triton's default


def _add_request_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("logging, tracing, response cache and message size")
    group.add_argument(
        "--log-format",
        dest="serve_log_format",
        choices=["text", "json", "default", "ISO8601"],
        default=None,
        help="as 'sonic --log-format', or Triton's: default (text), ISO8601 (text, ISO 8601 UTC times)",
    )
    group.add_argument(
        "--log-requests",
        action="store_true",
        help="one structured log record per inference (with request id)",
    )
    group.add_argument(
        "--otel-tracing",
        action="store_true",
        help="OpenTelemetry span per inference (needs opentelemetry-api)",
    )
    group.add_argument(
        "--cache-size-bytes",
        type=int,
        default=0,
        help="server-wide response cache for models with response_cache { enable: true } (0: off)",
    )
    group.add_argument(
        "--inline-execution-us",
        type=int,
        default=DEFAULT_INLINE_EXECUTION_US,
        metavar="US",
        help="a model version whose executions take under US µs runs them on the event loop, not on its "
        "instance threads (onnxruntime CPU and trees models; 0: never)",
    )
    group.add_argument(
        "--max-message-bytes",
        type=int,
        default=MAX_MESSAGE_BYTES,
        help="largest gRPC message / HTTP body",
    )


def config_from_args(args: argparse.Namespace, triton: TritonSettings | None = None) -> ServerConfig:
    triton = triton or TritonSettings()
    if not args.model_repository:
        msg = "the following arguments are required: --model-repository"
        raise ValueError(msg)
    return ServerConfig(
        server_name=args.server_name,
        exit_on_error=triton.exit_on_error,
        strict_readiness=triton.strict_readiness,
        auto_complete_config=triton.auto_complete,
        rate_limit=triton.rate_limit,
        traffic_log=traffic_config_from_args(args),
        model_repositories=tuple(args.model_repository),
        host=args.host,
        model_control_mode=ModelControlMode(args.model_control_mode),
        load_models=tuple(args.load_model),
        repository_poll_s=args.repository_poll_secs,
        exit_timeout_s=args.exit_timeout_secs,
        gpu_count=detect_gpu_count() if args.gpus is None else args.gpus,
        backend_options=parse_backend_config(args.backend_config),
        max_message_bytes=args.max_message_bytes,
        cache_size_bytes=args.cache_size_bytes,
        inline_execution_us=args.inline_execution_us,
        log_requests=args.log_requests,
        otel_tracing=args.otel_tracing,
        trace=triton.trace,
        grpc=grpc_config_from_args(args, triton.grpc_header_forward_pattern),
        http=http_config_from_args(args, triton.http_header_forward_pattern),
        metrics=metrics_config_from_args(args),
        budget=budget_config_from_args(args),
        security=security_config_from_args(args),
    )


def _stdout_to_log() -> None:
    """Send file descriptor 1 to stderr (the log) once the ready line is out.

    Launchers read stdout only up to the ready line and then leave the pipe unread, so model code
    that prints while serving (Python models, C libraries writing to fd 1) would fill the pipe and
    block the server. Triton, likewise, puts model output in its log.
    """
    try:
        stdout, stderr = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # replaced streams (in-process callers): leave them
        return
    sys.stdout.flush()
    os.dup2(stderr, stdout)


async def serve(config: ServerConfig, log_control: LogControl | None = None) -> None:
    server = Server(config, log_control=log_control)
    # SIGINT/SIGTERM: drain; a second one exits at once; the previous handlers are back on return.
    with ShutdownSignals(asyncio.get_running_loop(), server) as signals:
        try:
            await server.start(freeze_heap=True)  # this process is the server's alone
            print(server.ready_line, flush=True)
            _stdout_to_log()
            await signals.requested.wait()
            log.info("shutdown requested: draining requests in flight (a second signal exits at once)")
        finally:
            await server.shutdown()


def log_settings_from_args(args: argparse.Namespace, triton: TritonSettings) -> LogSettings:
    """``sonic --log-level/--log-format``, ``serve --log-format`` and Triton's ``--log-*`` flags, as one
    set of settings (the flags win: they are the more specific)."""
    log_format = args.serve_log_format or args.log_format
    settings = LogSettings.from_level(
        args.log_level,
        "default" if log_format == "text" else log_format,
        str(triton.log_file) if triton.log_file is not None else "",
    )
    switches = triton.log_switches
    if switches.log_verbose_level is not None and switches.log_verbose_level < 0:
        msg = f"--log-verbose={switches.log_verbose_level}: expected an integer >= 0"
        raise ValueError(msg)
    return dataclasses.replace(
        settings,
        log_info=settings.log_info if switches.log_info is None else switches.log_info,
        log_warning=settings.log_warning if switches.log_warning is None else switches.log_warning,
        log_error=settings.log_error if switches.log_error is None else switches.log_error,
        log_verbose_level=(
            settings.log_verbose_level if switches.log_verbose_level is None else switches.log_verbose_level
        ),
    )


class _StartupError(Exception):
    """What stops ``sonic serve`` before it serves: reported once, by :func:`run`, with exit status 2."""


@contextlib.contextmanager
def _refused(*kinds: type[Exception], what: str = "") -> Iterator[None]:
    """A start-up step whose ``kinds`` of failure are the user's to fix: one line, no traceback."""
    try:
        yield
    except kinds as exc:
        raise _StartupError(f"{what}{exc}") from exc


def _startup(
    args: argparse.Namespace,
) -> tuple[ServerConfig, Callable[[], asyncio.AbstractEventLoop] | None, LogControl]:
    """Logging, Triton's flags, the configuration and the event loop, in that order."""
    with _refused(OSError, what="--log-file: "):
        if args.triton_log_file:  # first: as Triton's, every record goes there, the flag notices too
            configure_logging(args.log_level, args.log_format, Path(args.triton_log_file))
    with _refused(ValueError):
        triton = apply_triton_flags(args, log)
    with _refused(OSError, what="--log-file: "), _refused(ValueError):
        log_control = LogControl.install(log_settings_from_args(args, triton))
    with _refused(ValueError, OSError, argparse.ArgumentTypeError):
        config = config_from_args(args, triton)
        apply_malloc_threshold(args)  # this process is the server's alone, as serve's freeze_heap
    with _refused(ImportError):
        loop_factory = event_loop.loop_factory(args.loop)
    return config, loop_factory, log_control


def run(args: argparse.Namespace) -> int:
    try:
        config, loop_factory, log_control = _startup(args)
    except _StartupError as exc:
        print(f"sonic serve: {exc}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(config, log_control))
    except StartFailure as exc:  # Triton's line (scripts look for it), then ours
        print(exc.triton_line(), file=sys.stderr)
        if exc.detail:
            print(f"sonic serve: {exc.detail}", file=sys.stderr)
        return 1
    except (SonicError, OSError, ImportError, ValueError) as exc:
        print(f"sonic serve: {exc}", file=sys.stderr)
        return 1
    return 0
