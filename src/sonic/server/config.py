"""Server configuration: a frozen description of what ``sonic serve`` should run.

:class:`ServerConfig` holds the model repositories and how they are served; its option groups (gRPC,
HTTP, metrics, the request buffer budget, security) are frozen dataclasses of their own, each made by
one builder in ``sonic.cli`` from one argparse group of ``sonic serve``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sonic.h2.limits import SERVER_LIMITS, Http2Limits
from sonic.protocol.wire import MAX_MESSAGE_BYTES
from sonic.server.budget import DEFAULT_WAIT_S, default_budget_bytes
from sonic.server.header_forward import HeaderForward
from sonic.server.runtime.inline import DEFAULT_INLINE_EXECUTION_US
from sonic.server.runtime.rate_limiter import ResourceCount
from sonic.server.trace.config import TraceConfig
from sonic.traffic.config import TrafficLogConfig


class ModelControlMode(enum.StrEnum):
    NONE = "none"  # load every model at start, no load/unload API
    EXPLICIT = "explicit"  # load only through the API (and --load-model)
    POLL = "poll"  # rescan the repositories every repository_poll_s


@dataclass(frozen=True)
class BackendOptions:
    """``--backend-config`` settings: Triton's global ones (``KEY=VALUE``) and each backend's own
    (``BACKEND,KEY=VALUE``), the last of a repeated setting kept."""

    global_settings: Mapping[str, str] = field(default_factory=dict)
    per_backend: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def for_backend(self, name: str) -> dict[str, str]:
        """What backend ``name`` is given, as Triton's core merges them: the global settings, then the
        backend's own, which win."""
        return {**self.global_settings, **self.per_backend.get(name, {})}


# A compressed gRPC message inflates to at most this much (or the message limit, when lower).
MAX_GRPC_DECOMPRESSED_BYTES = 256 << 20


@dataclass(frozen=True)
class TlsConfig:
    """Server certificate for gRPC and HTTP; with ``client_ca_path`` clients must present one (mTLS)."""

    cert_path: Path
    key_path: Path
    client_ca_path: Path | None = None


@dataclass(frozen=True)
class AuthConfig:
    """Bearer tokens: a static list, and/or JWTs verified against a local JSON Web Key Set."""

    tokens: frozenset[str] = frozenset()
    jwks_path: Path | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    health_needs_token: bool = False  # load balancers usually probe health without credentials

    def __post_init__(self) -> None:
        if not self.tokens and self.jwks_path is None:
            msg = "authentication needs at least one static token or a JWT key set"
            raise ValueError(msg)


@dataclass(frozen=True)
class AdmissionConfig:
    """SuperSONIC's rule: over the load threshold, refuse new clients; never drop work in flight.

    The load metric is queue time per execution, ``d(nv_inference_queue_duration_us) /
    d(nv_inference_exec_count)``, over the last ``window_s``.
    """

    queue_threshold_us: float
    window_s: float = 30.0

    def __post_init__(self) -> None:
        if self.queue_threshold_us < 0 or self.window_s <= 0:
            raise ValueError(
                f"admission needs queue_threshold_us >= 0 and window_s > 0, got "
                f"{self.queue_threshold_us} and {self.window_s}"
            )


class GrpcServerKind(enum.StrEnum):
    """Which HTTP/2 stack serves gRPC: our own (``h2``, :mod:`sonic.h2`, lean, the default) or grpcio's
    asyncio server."""

    H2 = "h2"
    GRPCIO = "grpcio"

    @classmethod
    def _missing_(cls, value: object) -> GrpcServerKind | None:
        """``native``, the old name of ``h2``, is still accepted; the log says so (once per use)."""
        if value != "native":
            return None
        logging.getLogger(__name__).warning("'native' is the old name of 'h2' (--grpc-server h2)")
        return cls.H2


@dataclass(frozen=True)
class RateLimitConfig:
    """Triton's ``--rate-limit execution_count``: instances run when their ``rate_limiter`` resources are
    free. ``resources`` (``--rate-limit-resource``) set the pool; empty: each resource's largest need."""

    resources: tuple[ResourceCount, ...] = ()


@dataclass(frozen=True)
class GrpcConfig:
    """The gRPC front end (``sonic serve``'s "gRPC" options, ``cli/serve_grpc.py``)."""

    port: int = 8001  # 0 picks a free port
    server: GrpcServerKind = GrpcServerKind.H2
    max_concurrent_streams: int | None = None  # per connection; None: grpcio's or Http2Limits'
    max_decompressed_bytes: int = MAX_GRPC_DECOMPRESSED_BYTES
    http2_limits: Http2Limits = SERVER_LIMITS  # the h2 stack's HTTP/2 limits (grpcio has no equivalent)
    # Triton's --grpc-header-forward-pattern: headers whose names match reach the model as request
    # parameters (server/header_forward.py); "": none.
    header_forward_pattern: str = ""

    def __post_init__(self) -> None:
        HeaderForward.compile(self.header_forward_pattern, "--grpc-header-forward-pattern")


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP/REST front end (``cli/serve_http.py``)."""

    port: int | None = None  # None: no HTTP/REST front end; 0 picks a free port
    max_connections_per_client: int | None = None  # open HTTP connections per client address
    header_forward_pattern: str = ""  # Triton's --http-header-forward-pattern, as GrpcConfig's

    def __post_init__(self) -> None:
        HeaderForward.compile(self.header_forward_pattern, "--http-header-forward-pattern")


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus endpoint (``cli/serve_http.py``)."""

    port: int | None = None  # None: no Prometheus endpoint; 0 picks a free port
    histograms: bool = True  # per-request latency histograms (needs port)


@dataclass(frozen=True)
class BudgetConfig:
    """Request bodies buffered by all HTTP and native gRPC connections together (server/budget.py).

    The default total is a quarter of the machine's (or the container's) memory, within 64 MiB and 16 GiB.
    """

    total_bytes: int = field(default_factory=default_budget_bytes)
    wait_s: float = DEFAULT_WAIT_S  # longest wait for room, then 503 / RESOURCE_EXHAUSTED

    def __post_init__(self) -> None:
        if self.total_bytes < 1 or self.wait_s <= 0:
            raise ValueError(
                f"the request buffer budget needs total_bytes >= 1 and wait_s > 0, got "
                f"{self.total_bytes} and {self.wait_s}"
            )


@dataclass(frozen=True)
class SecurityConfig:
    """Who may call, how often, and what a call or a repository may reach (docs/security.md,
    ``cli/serve_security.py``)."""

    tls: TlsConfig | None = None
    auth: AuthConfig | None = None
    admission: AdmissionConfig | None = None
    max_requests_per_s: float | None = None  # per client address, token bucket; None: unlimited
    request_burst: int = 100  # token-bucket depth for max_requests_per_s
    repository_control: bool = True  # False: load/unload refused even in explicit mode
    # Links placed in the repositories (a model folder, a model file) may lead elsewhere, as Triton follows
    # them; False (--refuse-model-links-outside): everything must resolve inside. A name a load override
    # gives is confined to its model's folder either way (sonic.server.models.paths).
    allow_model_links_outside: bool = True
    allow_shm_from_other_users: bool = False  # True: shared memory objects of any owner may be registered
    shm_copy_always: bool = False  # True: never map a shared memory region, copy through its descriptor

    def __post_init__(self) -> None:
        if self.max_requests_per_s is not None and self.max_requests_per_s <= 0:
            raise ValueError(f"max_requests_per_s must be > 0, got {self.max_requests_per_s}")


@dataclass(frozen=True)
class ServerConfig:
    model_repositories: tuple[Path, ...]
    host: str = "127.0.0.1"  # one bind address for every front end
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()  # explicit mode: loaded at start ("*" loads all)
    repository_poll_s: float = 15.0
    exit_timeout_s: float = 30.0  # drain time for in-flight requests at shutdown
    gpu_count: int = 0
    backend_options: BackendOptions = field(default_factory=BackendOptions)
    # The largest gRPC message and HTTP body, Triton's: the same requests fit both servers.
    max_message_bytes: int = MAX_MESSAGE_BYTES
    server_name: str = "triton"  # Triton's --id default: clients check ServerMetadata.name
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    cache_size_bytes: int = 0  # response cache for models that enable it; 0: no cache
    log_requests: bool = False  # one structured log record per inference request
    otel_tracing: bool = False  # OpenTelemetry spans around requests (needs opentelemetry-api)
    trace: TraceConfig = field(default_factory=TraceConfig)  # Triton's trace extension (--trace-config)
    exit_on_error: bool = True  # Triton's --exit-on-error (default true): fail start-up when a model fails
    # Triton's --strict-readiness (default true): the server is ready only while every model it has is.
    strict_readiness: bool = True
    auto_complete_config: bool = True  # False (Triton's --disable-auto-complete-config): configs are whole
    rate_limit: RateLimitConfig | None = None  # None: Triton's --rate-limit off (rate_limiter ignored)
    traffic_log: TrafficLogConfig | None = None  # --traffic-log DIR: one record per request, for replay
    # --inline-execution-us: a version whose executions stay under this runs its batches on the event
    # loop (server/runtime/inline.py); 0: always on its instance threads.
    inline_execution_us: int = DEFAULT_INLINE_EXECUTION_US

    def __post_init__(self) -> None:
        if not self.model_repositories:
            msg = "at least one model repository is needed"
            raise ValueError(msg)
        if self.repository_poll_s <= 0:
            raise ValueError(f"repository_poll_s must be > 0, got {self.repository_poll_s}")
        if self.cache_size_bytes < 0:
            raise ValueError(f"cache_size_bytes must be >= 0, got {self.cache_size_bytes}")
        if self.inline_execution_us < 0:
            raise ValueError(f"--inline-execution-us must be >= 0 (0: never), got {self.inline_execution_us}")
