"""``tritonserver``'s command-line flags on ``sonic serve``, so launchers written for Triton start sonic.

One table, :data:`TRITON_FLAGS`, one line per flag ``sonic serve`` learns from Triton (the flags both
share, such as ``--grpc-port`` or ``--model-control-mode``, are ``serve``'s own). Each is
``implemented`` (translated into sonic's own setting by :func:`apply_triton_flags`), ``noticed``
(accepted with a one-line notice: it has no meaning here, e.g. GPU memory pools) or ``refused`` (we
cannot honour it, and running as if we did would serve something else than was asked), except for
the values listed as harmless, which are noticed. argparse gives both spellings, ``--flag=value`` and
``--flag value``; boolean flags may also stand alone (``--allow-gpu-metrics`` means true).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from sonic.server.config import RateLimitConfig
from sonic.server.runtime.rate_limiter import ResourceCount
from sonic.server.trace.config import TraceConfig, TraceFlags, parse_trace_flags

Kind = Literal["implemented", "noticed", "refused"]
IMPLEMENTED: Final = "implemented"
NOTICED: Final = "noticed"
REFUSED: Final = "refused"
Value = Literal["bool", "int", "str", "list", "none"]


@dataclass(frozen=True)
class TritonFlag:
    kind: Kind
    value: Value
    why: str  # what sonic does with it (docs/server-operations.md has the same table)
    harmless: tuple[str, ...] = ()  # values of a refused flag that change nothing here


TRITON_FLAGS: dict[str, TritonFlag] = {
    "--model-store": TritonFlag(IMPLEMENTED, "list", "same as --model-repository"),
    "--id": TritonFlag(IMPLEMENTED, "str", "server name in ServerMetadata (default triton, as Triton)"),
    "--log-verbose": TritonFlag(IMPLEMENTED, "int", "> 0: DEBUG logs"),
    "--log-info": TritonFlag(IMPLEMENTED, "bool", "false: no INFO records"),
    "--log-warning": TritonFlag(IMPLEMENTED, "bool", "false: no WARNING records"),
    "--log-error": TritonFlag(IMPLEMENTED, "bool", "false: no ERROR (or CRITICAL) records"),
    "--exit-on-error": TritonFlag(
        IMPLEMENTED, "bool", "true (default, as Triton): exit 1 when a model fails to load at start"
    ),
    "--strict-model-config": TritonFlag(
        IMPLEMENTED, "bool", "true: no auto-complete (configs must be whole)"
    ),
    "--disable-auto-complete-config": TritonFlag(IMPLEMENTED, "none", "no auto-complete"),
    "--allow-http": TritonFlag(IMPLEMENTED, "bool", "true: HTTP on --http-port (8000); false: no HTTP"),
    "--allow-metrics": TritonFlag(IMPLEMENTED, "bool", "true: metrics on --metrics-port (8002); false: none"),
    "--allow-grpc": TritonFlag(REFUSED, "bool", "sonic always serves gRPC", ("true", "1", "yes", "on")),
    "--grpc-address": TritonFlag(IMPLEMENTED, "str", "bind address (one for all frontends: --host)"),
    "--http-address": TritonFlag(IMPLEMENTED, "str", "bind address (one for all frontends: --host)"),
    "--metrics-address": TritonFlag(IMPLEMENTED, "str", "bind address (one for all frontends: --host)"),
    "--response-cache-byte-size": TritonFlag(IMPLEMENTED, "int", "same as --cache-size-bytes"),
    "--cache-config": TritonFlag(IMPLEMENTED, "list", "local,size=N: same as --cache-size-bytes N"),
    "--grpc-use-ssl": TritonFlag(IMPLEMENTED, "bool", "TLS with --grpc-server-cert/-key (gRPC and HTTP)"),
    "--grpc-use-ssl-mutual": TritonFlag(IMPLEMENTED, "bool", "mutual TLS with --grpc-root-cert"),
    "--grpc-server-cert": TritonFlag(IMPLEMENTED, "str", "same as --tls-cert"),
    "--grpc-server-key": TritonFlag(IMPLEMENTED, "str", "same as --tls-key"),
    "--grpc-root-cert": TritonFlag(IMPLEMENTED, "str", "same as --tls-client-ca (with mutual TLS)"),
    "--grpc-keepalive-time": TritonFlag(IMPLEMENTED, "int", "ms: same as --grpc-keepalive-secs"),
    "--grpc-keepalive-timeout": TritonFlag(IMPLEMENTED, "int", "ms: same as --grpc-keepalive-timeout-secs"),
    "--allow-gpu-metrics": TritonFlag(
        NOTICED, "bool", "GPU metrics come with the GPU backends' own counters"
    ),
    "--allow-cpu-metrics": TritonFlag(NOTICED, "bool", "no CPU metrics family"),
    "--metrics-interval-ms": TritonFlag(NOTICED, "str", "metrics are computed when scraped"),
    "--metrics-config": TritonFlag(NOTICED, "list", "metric families are fixed"),
    "--strict-readiness": TritonFlag(
        IMPLEMENTED, "bool", "true (default, as Triton): ready only while every model is; false: once started"
    ),
    "--log-file": TritonFlag(IMPLEMENTED, "str", "logs appended to this file instead of stderr"),
    "--backend-directory": TritonFlag(NOTICED, "str", "backends are Python modules"),
    "--repoagent-directory": TritonFlag(
        NOTICED,
        "str",
        "the checksum agent is built in (it runs at every load); any other agent fails the load, as Triton "
        "fails one it cannot find (searched: /opt/tritonserver/repoagents, Triton's default)",
    ),
    "--cache-directory": TritonFlag(NOTICED, "str", "the cache is built in"),
    "--pinned-memory-pool-byte-size": TritonFlag(NOTICED, "int", "no pinned-memory pool"),
    "--cuda-memory-pool-byte-size": TritonFlag(NOTICED, "list", "no CUDA memory pool (frameworks allocate)"),
    "--cuda-virtual-address-size": TritonFlag(NOTICED, "list", "no CUDA memory pool"),
    "--min-supported-compute-capability": TritonFlag(NOTICED, "str", "frameworks check their GPUs"),
    "--buffer-manager-thread-count": TritonFlag(NOTICED, "int", "no buffer manager threads"),
    "--model-load-thread-count": TritonFlag(NOTICED, "int", "models load one after the other"),
    "--model-load-retry-count": TritonFlag(NOTICED, "int", "no load retries"),
    "--enable-peer-access": TritonFlag(NOTICED, "bool", "no CUDA peer access setting"),
    "--host-policy": TritonFlag(NOTICED, "list", "no NUMA/CPU pinning"),
    "--model-load-gpu-limit": TritonFlag(NOTICED, "list", "no GPU memory limit at load"),
    "--http-thread-count": TritonFlag(NOTICED, "int", "HTTP runs on the event loop"),
    "--reuse-http-port": TritonFlag(NOTICED, "bool", "ports are not shared"),
    "--reuse-grpc-port": TritonFlag(NOTICED, "bool", "ports are not shared"),
    "--grpc-infer-allocation-pool-size": TritonFlag(NOTICED, "int", "no allocation pool"),
    "--grpc-infer-response-compression-level": TritonFlag(NOTICED, "str", "responses go uncompressed"),
    "--grpc-keepalive-permit-without-calls": TritonFlag(
        NOTICED, "bool", "keepalive pings are always allowed"
    ),
    "--grpc-http2-max-pings-without-data": TritonFlag(NOTICED, "int", "pings are not limited"),
    "--grpc-http2-min-recv-ping-interval-without-data": TritonFlag(NOTICED, "int", "pings are not limited"),
    "--grpc-http2-max-ping-strikes": TritonFlag(NOTICED, "int", "pings are not limited"),
    "--grpc-max-connection-age": TritonFlag(NOTICED, "int", "use --grpc-idle-timeout-secs"),
    "--grpc-max-connection-age-grace": TritonFlag(NOTICED, "int", "use --grpc-idle-timeout-secs"),
    "--grpc-header-forward-pattern": TritonFlag(
        IMPLEMENTED, "str", "matching gRPC headers become request parameters (reserved names excepted)"
    ),
    "--http-header-forward-pattern": TritonFlag(
        IMPLEMENTED, "str", "matching HTTP headers become request parameters (reserved names excepted)"
    ),
    "--trace-config": TritonFlag(
        IMPLEMENTED, "list", "Triton's tracing: level, rate, count, mode, triton,file=..."
    ),
    "--trace-file": TritonFlag(IMPLEMENTED, "str", "deprecated: --trace-config triton,file=PATH"),
    "--trace-level": TritonFlag(IMPLEMENTED, "list", "deprecated: --trace-config level=LEVEL"),
    "--trace-rate": TritonFlag(IMPLEMENTED, "int", "deprecated: --trace-config rate=N"),
    "--trace-count": TritonFlag(IMPLEMENTED, "int", "deprecated: --trace-config count=N"),
    "--trace-log-frequency": TritonFlag(
        IMPLEMENTED, "int", "deprecated: --trace-config triton,log-frequency=N"
    ),
    "--rate-limit": TritonFlag(
        IMPLEMENTED, "str", "execution_count: instances wait for their rate_limiter resources; off"
    ),
    "--rate-limit-resource": TritonFlag(IMPLEMENTED, "list", "NAME:COUNT[:DEVICE], the rate limiter's pool"),
    "--model-namespacing": TritonFlag(REFUSED, "bool", "model names are global", ("false", "0", "no", "off")),
    "--model-config-name": TritonFlag(REFUSED, "str", "only config.pbtxt is read"),
    "--http-restricted-api": TritonFlag(REFUSED, "list", "no per-API restriction: use --auth-token-file"),
    "--grpc-restricted-protocol": TritonFlag(
        REFUSED, "list", "no per-API restriction: use --auth-token-file"
    ),
    "--allow-sagemaker": TritonFlag(REFUSED, "bool", "no SageMaker frontend", ("false", "0", "no", "off")),
    "--sagemaker-port": TritonFlag(NOTICED, "int", "no SageMaker frontend"),
    "--sagemaker-safe-port-range": TritonFlag(NOTICED, "str", "no SageMaker frontend"),
    "--sagemaker-thread-count": TritonFlag(NOTICED, "int", "no SageMaker frontend"),
    "--allow-vertex-ai": TritonFlag(REFUSED, "bool", "no Vertex AI frontend", ("false", "0", "no", "off")),
    "--vertex-ai-port": TritonFlag(NOTICED, "int", "no Vertex AI frontend"),
    "--vertex-ai-thread-count": TritonFlag(NOTICED, "int", "no Vertex AI frontend"),
    "--vertex-ai-default-model": TritonFlag(NOTICED, "str", "no Vertex AI frontend"),
}

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _dest(flag: str) -> str:
    return "triton_" + flag.removeprefix("--").replace("-", "_")


def add_triton_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tritonserver flags (see docs/server-operations.md)")
    for flag, spec in TRITON_FLAGS.items():
        dest, help_text = _dest(flag), f"{spec.kind}: {spec.why}"
        if spec.value == "none":
            group.add_argument(flag, dest=dest, action="store_true", help=help_text)
        elif spec.value == "bool":  # Triton's booleans take a value; alone they mean true
            group.add_argument(flag, dest=dest, nargs="?", const="true", metavar="BOOL", help=help_text)
        elif spec.value == "list":
            group.add_argument(flag, dest=dest, action="append", metavar="VALUE", help=help_text)
        else:
            group.add_argument(flag, dest=dest, metavar=spec.value.upper(), help=help_text)


def parse_bool(flag: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE or lowered in _FALSE:
        return lowered in _TRUE
    raise ValueError(f"{flag}={value}: expected a boolean (true/false, 1/0, yes/no, on/off)")


def _int(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag}={value}: expected an integer") from None


@dataclass(frozen=True)
class LogSwitches:
    """Triton's ``--log-info/--log-warning/--log-error/--log-verbose``: None where the flag was not given."""

    log_info: bool | None = None
    log_warning: bool | None = None
    log_error: bool | None = None
    log_verbose_level: int | None = None


@dataclass
class TritonSettings:
    """What the implemented flags ask for that is not a plain ``serve`` argument."""

    log_level: str | None = None
    log_file: Path | None = None
    log_switches: LogSwitches = field(default_factory=LogSwitches)
    exit_on_error: bool = True  # Triton's defaults: a Triton command line works unchanged
    strict_readiness: bool = True
    auto_complete: bool = True
    rate_limit: RateLimitConfig | None = None  # --rate-limit execution_count
    trace: TraceConfig = field(default_factory=TraceConfig)  # --trace-config and the deprecated --trace-*
    grpc_header_forward_pattern: str = ""  # --grpc-header-forward-pattern
    http_header_forward_pattern: str = ""  # --http-header-forward-pattern


def apply_triton_flags(args: argparse.Namespace, log: logging.Logger) -> TritonSettings:
    """Check the Triton flags given: raise ValueError for refused ones, notice the others, map the rest."""
    given = {flag: getattr(args, _dest(flag)) for flag in TRITON_FLAGS}
    given = {flag: value for flag, value in given.items() if value not in (None, False)}
    for flag, value in given.items():
        spec = TRITON_FLAGS[flag]
        shown = ",".join(value) if isinstance(value, list) else value
        if spec.kind == REFUSED and str(value).lower() not in spec.harmless:
            raise ValueError(f"{flag}={shown} is not supported by sonic serve: {spec.why}")
        if spec.kind != IMPLEMENTED:
            log.warning("sonic serve: %s=%s accepted, no effect here (%s)", flag, shown, spec.why)
    settings = TritonSettings()
    _map_logging(given, settings)
    _map_frontends(args, given)
    _map_tls(args, given)
    for flag in ("--model-store",):
        for repository in given.get(flag, []):
            args.model_repository = [*(args.model_repository or []), Path(repository)]
    if "--id" in given:
        args.server_name = given["--id"]
    if "--exit-on-error" in given:
        settings.exit_on_error = parse_bool("--exit-on-error", given["--exit-on-error"])
    if "--strict-readiness" in given:
        settings.strict_readiness = parse_bool("--strict-readiness", given["--strict-readiness"])
    strict = "--strict-model-config" in given and parse_bool(
        "--strict-model-config", given["--strict-model-config"]
    )
    settings.auto_complete = not (strict or "--disable-auto-complete-config" in given)
    if "--response-cache-byte-size" in given:
        args.cache_size_bytes = _int("--response-cache-byte-size", given["--response-cache-byte-size"])
    settings.rate_limit = _rate_limit(given)
    settings.trace = _trace(given, log)
    settings.grpc_header_forward_pattern = str(given.get("--grpc-header-forward-pattern", ""))
    settings.http_header_forward_pattern = str(given.get("--http-header-forward-pattern", ""))
    for entry in given.get("--cache-config", []):
        cache, _, setting = entry.partition(",")
        key, _, size = setting.partition("=")
        if cache != "local" or key != "size":
            raise ValueError(f"--cache-config={entry}: sonic's cache takes only local,size=BYTES")
        args.cache_size_bytes = _int("--cache-config", size)
    return settings


def _rate_limit(given: dict[str, object]) -> RateLimitConfig | None:
    mode = str(given.get("--rate-limit", "off")).lower()
    if mode not in ("off", "execution_count"):
        raise ValueError(f"--rate-limit={mode}: expected execution_count or off")
    entries = given.get("--rate-limit-resource", [])
    resources = [ResourceCount.parse(str(entry)) for entry in (entries if isinstance(entries, list) else [])]
    if mode == "off":
        return None  # as Triton: the rate_limiter sections and resources are ignored
    return RateLimitConfig(tuple(resources))


def _trace(given: dict[str, object], log: logging.Logger) -> TraceConfig:
    def text(flag: str) -> str | None:
        return str(given[flag]) if flag in given else None

    def texts(flag: str) -> list[str]:
        value = given.get(flag, [])
        return [str(v) for v in value] if isinstance(value, list) else []

    flags = TraceFlags(
        trace_config=texts("--trace-config"),
        trace_file=text("--trace-file"),
        trace_level=texts("--trace-level"),
        trace_rate=text("--trace-rate"),
        trace_count=text("--trace-count"),
        trace_log_frequency=text("--trace-log-frequency"),
    )
    config, notices = parse_trace_flags(flags)  # TraceFlagError is a ValueError: refused as Triton refuses
    for notice in notices:
        log.warning("sonic serve: %s", notice)
    return config


def _map_logging(given: dict[str, object], settings: TritonSettings) -> None:
    if "--log-file" in given:
        settings.log_file = Path(str(given["--log-file"]))

    def switch(flag: str) -> bool | None:
        return parse_bool(flag, str(given[flag])) if flag in given else None

    settings.log_switches = LogSwitches(
        log_info=switch("--log-info"),
        log_warning=switch("--log-warning"),
        log_error=switch("--log-error"),
        log_verbose_level=_int("--log-verbose", str(given["--log-verbose"]))
        if "--log-verbose" in given
        else None,
    )
    if _int("--log-verbose", str(given.get("--log-verbose", "0"))) > 0:
        settings.log_level = "DEBUG"
        return
    for flag, level in (("--log-error", "CRITICAL"), ("--log-warning", "ERROR"), ("--log-info", "WARNING")):
        if flag in given and not parse_bool(flag, str(given[flag])):
            settings.log_level = level
            return


def _map_frontends(args: argparse.Namespace, given: dict[str, object]) -> None:
    addresses = {
        str(given[f]) for f in ("--grpc-address", "--http-address", "--metrics-address") if f in given
    }
    if len(addresses) > 1:
        raise ValueError(f"sonic serve binds all frontends to one address (--host), got {sorted(addresses)}")
    if addresses:
        args.host = addresses.pop()
    for flag, dest, default in (
        ("--allow-http", "http_port", 8000),
        ("--allow-metrics", "metrics_port", 8002),
    ):
        if flag not in given:
            continue
        if not parse_bool(flag, str(given[flag])):
            setattr(args, dest, None)
        elif getattr(args, dest) is None:
            setattr(args, dest, default)  # Triton's default port
    for flag, dest in (
        ("--grpc-keepalive-time", "grpc_keepalive_secs"),
        ("--grpc-keepalive-timeout", "grpc_keepalive_timeout_secs"),
    ):
        if flag in given:
            setattr(args, dest, _int(flag, str(given[flag])) / 1000)


def _map_tls(args: argparse.Namespace, given: dict[str, object]) -> None:
    use_ssl = "--grpc-use-ssl" in given and parse_bool("--grpc-use-ssl", str(given["--grpc-use-ssl"]))
    mutual = "--grpc-use-ssl-mutual" in given and parse_bool(
        "--grpc-use-ssl-mutual", str(given["--grpc-use-ssl-mutual"])
    )
    if not (use_ssl or mutual):
        return
    args.tls_cert = Path(str(given["--grpc-server-cert"])) if "--grpc-server-cert" in given else args.tls_cert
    args.tls_key = Path(str(given["--grpc-server-key"])) if "--grpc-server-key" in given else args.tls_key
    if mutual:
        if "--grpc-root-cert" not in given:
            msg = "--grpc-use-ssl-mutual needs --grpc-root-cert"
            raise ValueError(msg)
        args.tls_client_ca = Path(str(given["--grpc-root-cert"]))
