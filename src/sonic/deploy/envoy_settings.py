"""What an Envoy in front of ``sonic serve`` replicas is told: where the replicas are and which
optional filters run (admission, JWT, connection rate limit, TLS). Rendered by :mod:`sonic.deploy.envoy`."""

from __future__ import annotations

from dataclasses import dataclass

# Names the dashboards, rules and tests refer to.
REPLICA_CLUSTER = "sonic_replicas"
INGRESS_STAT_PREFIX = "sonic_ingress"
ADMISSION_HEADER = "x-sonic-admission"


@dataclass(frozen=True)
class Upstream:
    """Where the replicas are: a DNS name with one A record per replica, or fixed ``host:port``s."""

    service: str = ""  # Kubernetes headless Service, e.g. sonic-replicas.sonic.svc.cluster.local
    port: int = 8001
    addresses: tuple[str, ...] = ()  # one host: every replica's gRPC address

    def __post_init__(self) -> None:
        if bool(self.service) == bool(self.addresses):
            msg = "Upstream: give either a service name or replica addresses, not both or none"
            raise ValueError(msg)


@dataclass(frozen=True)
class Admission:
    """Refuse new jobs' RepositoryIndex while ``query`` (PromQL, one value) is above ``threshold``."""

    prometheus_host: str
    prometheus_port: int
    query: str
    threshold: float


@dataclass(frozen=True)
class JwtAuth:
    """Bearer tokens checked by Envoy's jwt_authn; keys from a local file or fetched from a URL."""

    issuer: str
    audiences: tuple[str, ...] = ()
    jwks_file: str = ""  # a JWKS file on Envoy's disk
    jwks_uri: str = ""  # https://issuer.example/.well-known/jwks.json
    jwks_host: str = ""  # the host and port Envoy connects to for jwks_uri (TLS)
    jwks_port: int = 443

    def __post_init__(self) -> None:
        if bool(self.jwks_file) == bool(self.jwks_uri):
            msg = "JwtAuth: give either jwks_file or jwks_uri (with jwks_host)"
            raise ValueError(msg)
        if self.jwks_uri and not self.jwks_host:
            raise ValueError(f"JwtAuth: jwks_uri {self.jwks_uri!r} needs jwks_host to connect to")


@dataclass(frozen=True)
class ConnectionRateLimit:
    """New connections per listener: a token bucket (Envoy's local_ratelimit listener filter)."""

    max_tokens: int
    tokens_per_fill: int
    fill_interval_s: float


@dataclass(frozen=True)
class ListenerTls:
    cert_file: str
    key_file: str


@dataclass(frozen=True)
class EnvoySettings:
    upstream: Upstream
    listen_address: str = "0.0.0.0"  # noqa: S104  (Envoy is the cluster's entry point)
    listen_port: int = 8001
    admin_address: str = "0.0.0.0"  # noqa: S104  (scraped by Prometheus from other pods)
    admin_port: int = 9901
    admission: Admission | None = None
    jwt: JwtAuth | None = None
    rate_limit: ConnectionRateLimit | None = None
    tls: ListenerTls | None = None
    route_timeout_s: float = 0.0  # 0: off (inference of a large event may take long)
    # Retries, circuit breakers and ejection: each number is explained in docs/deployment.md
    # ("Losing a replica").
    retries: int = 3
    eject_after_failures: int = 2  # consecutive connect failures / resets of one replica
    base_ejection_s: float = 10.0
    health_check_interval_s: float = 2.0
    dns_refresh_s: float = 2.0
