"""Client configuration: frozen, picklable, read from keyword arguments, a TOML file or the environment.

The environment is read only in :meth:`ClientConfig.from_env`:

- ``SONIC_SERVERS``: ``host:port,host:port``
- ``SONIC_SERVICES``: ``name:port,...``: each name (a Kubernetes headless Service) is resolved when the
  client connects, and every address it resolves to is one server
- ``SONIC_CONFIG``: a TOML file (see :meth:`ClientConfig.from_toml`); ``SONIC_SERVERS`` adds to its list
- ``SONIC_TOKEN``: bearer token sent with every call
- ``SONIC_FALLBACK_REPOSITORY``: model repository of the local fallback server (enables it)
- ``SONIC_SHARED_MEMORY``: ``auto`` (default), ``system`` or ``off``
- ``SONIC_TRANSPORT``: ``h2`` (default; ``native``, its old name, still works) or ``grpcio``
- ``SONIC_TIMEOUT``: per-request deadline in seconds (default 60; ``0`` or ``none``: no deadline)
- ``SONIC_PREFERRED_SERVER``: ``host:port`` chosen first while healthy (CMSSW's ``preferredServer``)
- ``SONIC_LOCAL_BALANCER_HOST`` and ``SONIC_LOCAL_BALANCER_PORT`` (default 8001): the site's load
  balancer, one more server (CMSSW reads them from SITECONF)
- ``SONIC_HANDLE_SIGNALS``: ``1`` lets the client unlink its shared memory on SIGTERM/SIGINT (it
  installs handlers that then pass the signal on); off by default so library users keep their signals
"""

from __future__ import annotations

import enum
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Self


class Compression(enum.StrEnum):
    NONE = "none"
    GZIP = "gzip"
    DEFLATE = "deflate"


class TransportKind(enum.StrEnum):
    H2 = "h2"  # our HTTP/2 gRPC client (sonic.client.transport.h2, on sonic.h2)
    GRPCIO = "grpcio"  # grpc aio, with ModelStreamInfer for small requests (sonic.client.transport.grpc)

    @classmethod
    def _missing_(cls, value: object) -> TransportKind | None:
        """``native``, the old name of ``h2``, is still accepted; the log says so (once per use)."""
        if value != "native":
            return None
        logging.getLogger(__name__).warning("'native' is the old name of 'h2' (transport = \"h2\")")
        return cls.H2


class Device(enum.StrEnum):
    AUTO = "auto"
    CPU = "cpu"
    GPU = "gpu"


class SharedMemoryMode(enum.StrEnum):
    AUTO = "auto"  # system shared memory with servers on this host, plain gRPC otherwise
    SYSTEM = "system"  # the same, and a warning when a local server refuses it
    OFF = "off"


class FallbackServerKind(enum.StrEnum):
    SONIC = "sonic"  # ``sonic serve`` from this installation
    TRITONSERVER = "tritonserver"  # a tritonserver binary given by path, or in a container image


@dataclass(frozen=True)
class TlsConfig:
    root_certificates: Path | None = None
    private_key: Path | None = None
    certificate_chain: Path | None = None

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        return tuple(  # type: ignore[return-value]
            p.read_bytes() if p is not None else None
            for p in (self.root_certificates, self.private_key, self.certificate_chain)
        )


@dataclass(frozen=True)
class FallbackConfig:
    """The local server started when no reachable server has a model (CMSSW's fallback options)."""

    enable: bool = False
    repositories: tuple[Path, ...] = ()
    kind: FallbackServerKind = FallbackServerKind.SONIC
    device: Device = Device.AUTO
    tritonserver_path: Path | None = None
    container: str = ""  # "", "apptainer", "docker" or "podman": run the image below with it
    image: str = ""
    retries: int = 2  # start attempts after the first one fails
    wait_timeout_s: float = 120.0
    instance_name: str = "sonic_fallback"
    temp_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.enable and not self.repositories:
            msg = "the fallback server is enabled but no model repository is given for it"
            raise ValueError(msg)
        if self.container not in {"", "apptainer", "docker", "podman"}:
            raise ValueError(f"fallback container '{self.container}': expected apptainer, docker or podman")
        if self.container and not self.image:
            raise ValueError(f"fallback container '{self.container}' needs an image")
        if self.retries < 0 or self.wait_timeout_s <= 0:
            raise ValueError(f"fallback retries {self.retries} must be >= 0, wait {self.wait_timeout_s} > 0")


# Per-request deadline: the slowest reference model (resnet50, seed batch 10) takes ~2 s per batch on a
# CPU and a few seconds merged; 60 s leaves room for a busy server's queue (docs/client.md).
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_BALANCER_PORT = 8001


@dataclass(frozen=True)
class ClientConfig:
    servers: tuple[str, ...] = ()
    # Headless Services (``name:port``): one server per DNS address, resolved when the client connects.
    services: tuple[str, ...] = ()
    # Per-request deadline (None: none). A miss makes the server suspect; the retry goes elsewhere.
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    allowed_tries: int = 3  # total attempts per request, the first included
    retry_backoff_s: float = 0.05  # delay before the second try, doubled each time
    retry_backoff_max_s: float = 2.0
    max_in_flight: int = 64  # requests on the wire at once, per client
    # >0: concurrent calls with the same input shapes are merged into batched requests, at most this many
    # merged requests in flight per shape (see sonic.client.coalesce); 0: every call is its own request.
    coalesce_in_flight: int = 0
    transport: TransportKind = TransportKind.H2
    stream_max_bytes: int = 65536  # grpcio transport: smaller requests share one ModelStreamInfer stream
    compression: Compression = Compression.NONE
    tls: TlsConfig | None = None
    token: str = ""
    shared_memory: SharedMemoryMode = SharedMemoryMode.AUTO
    shm_min_bytes: int = 65536  # smaller requests (inputs and outputs) skip shared memory
    control_timeout_s: float = 10.0  # metadata, discovery and shared-memory calls (not inference)
    # HTTP/2 keepalive: a connection silent for keepalive_s is PINGed; no answer within
    # keepalive_timeout_s closes it, and its calls are sent again elsewhere (None: off).
    keepalive_s: float | None = 10.0
    keepalive_timeout_s: float = 5.0
    # Background probes of servers that failed (see sonic.client.health): first after probe_backoff_s,
    # doubling to probe_backoff_max_s, each call within probe_timeout_s.
    probe_backoff_s: float = 0.25
    probe_backoff_max_s: float = 4.0
    probe_timeout_s: float = 2.0
    preferred_server: str = ""  # host:port chosen first while healthy (CMSSW's preferredServer)
    # Unlink this process's shared memory on SIGTERM/SIGINT too (handlers installed by the client,
    # chained to the ones before); it is always unlinked on close and at interpreter exit.
    handle_signals: bool = False
    verbose: bool = False  # server-side timing breakdown per call (ModelStatistics deltas)
    fallback: FallbackConfig = field(default_factory=FallbackConfig)

    def __post_init__(self) -> None:
        if self.allowed_tries < 1:
            raise ValueError(f"allowed_tries must be >= 1, got {self.allowed_tries}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or None (no deadline), got {self.timeout_s}")
        if self.keepalive_s is not None and self.keepalive_s <= 0:
            raise ValueError(f"keepalive_s must be > 0 or None (off), got {self.keepalive_s}")
        if min(self.keepalive_timeout_s, self.probe_backoff_s, self.probe_timeout_s) <= 0:
            msg = "keepalive_timeout_s, probe_backoff_s and probe_timeout_s must be > 0"
            raise ValueError(msg)
        if self.probe_backoff_max_s < self.probe_backoff_s:
            raise ValueError(
                f"probe_backoff_max_s {self.probe_backoff_max_s} is below probe_backoff_s {self.probe_backoff_s}"
            )
        for address in (*self.servers, *filter(None, [self.preferred_server])):
            if ":" not in address:
                raise ValueError(f"server address '{address}': expected host:port")
        for service in self.services:
            if not service.rpartition(":")[2].isdigit():
                raise ValueError(
                    f"service '{service}': expected name:port, e.g. sonic-replicas.sonic.svc:8001"
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "config") -> Self:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(
                f"{where}: unknown client settings {sorted(unknown)}; expected some of {sorted(known)}"
            )
        values = dict(data)
        for key in ("servers", "services"):
            if key in values:
                values[key] = tuple(values[key])
        for key, kind in (
            ("compression", Compression),
            ("shared_memory", SharedMemoryMode),
            ("transport", TransportKind),
        ):
            if key in values:
                values[key] = kind(values[key])
        if "tls" in values:
            values["tls"] = TlsConfig(**{k: Path(v) for k, v in values["tls"].items()})
        if "fallback" in values:
            values["fallback"] = _fallback_from_mapping(values["fallback"], f"{where} [fallback]")
        return cls(**values)

    @classmethod
    def from_toml(cls, path: Path) -> Self:
        """A TOML file: top-level client settings, ``servers = [...]``, ``[tls]`` and ``[fallback]``."""
        with path.open("rb") as handle:
            data = tomllib.load(handle)
        base = path.parent
        if "fallback" in data and "repositories" in data["fallback"]:
            data["fallback"]["repositories"] = [str(base / p) for p in data["fallback"]["repositories"]]
        return cls.from_mapping(data, str(path))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        env = os.environ if environ is None else environ
        config = cls.from_toml(Path(env["SONIC_CONFIG"])) if env.get("SONIC_CONFIG") else cls()
        servers = tuple(s.strip() for s in env.get("SONIC_SERVERS", "").split(",") if s.strip())
        services = tuple(s.strip() for s in env.get("SONIC_SERVICES", "").split(",") if s.strip())
        changes: dict[str, Any] = {
            "servers": config.servers + servers,
            "services": config.services + services,
        }
        if env.get("SONIC_TOKEN"):
            changes["token"] = env["SONIC_TOKEN"]
        if env.get("SONIC_TRANSPORT"):
            changes["transport"] = TransportKind(env["SONIC_TRANSPORT"])
        if env.get("SONIC_SHARED_MEMORY"):
            changes["shared_memory"] = SharedMemoryMode(env["SONIC_SHARED_MEMORY"])
        balancer = env.get("SONIC_LOCAL_BALANCER_HOST", "").strip()
        if balancer:
            port = env.get("SONIC_LOCAL_BALANCER_PORT", "").strip() or str(DEFAULT_BALANCER_PORT)
            address = f"[{balancer}]:{port}" if ":" in balancer else f"{balancer}:{port}"
            if address not in changes["servers"]:
                changes["servers"] += (address,)
        if env.get("SONIC_TIMEOUT"):
            value = env["SONIC_TIMEOUT"].strip().lower()
            changes["timeout_s"] = None if value in {"0", "none"} else float(value)
        if env.get("SONIC_PREFERRED_SERVER"):
            changes["preferred_server"] = env["SONIC_PREFERRED_SERVER"].strip()
        if env.get("SONIC_HANDLE_SIGNALS"):
            changes["handle_signals"] = env["SONIC_HANDLE_SIGNALS"].strip().lower() in {"1", "true", "yes"}
        if env.get("SONIC_FALLBACK_REPOSITORY"):
            repositories = tuple(Path(p) for p in env["SONIC_FALLBACK_REPOSITORY"].split(os.pathsep))
            changes["fallback"] = replace(config.fallback, enable=True, repositories=repositories)
        changes.update(overrides)
        return replace(config, **changes)


def _fallback_from_mapping(data: Mapping[str, Any], where: str) -> FallbackConfig:
    known = {f.name for f in fields(FallbackConfig)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(
            f"{where}: unknown fallback settings {sorted(unknown)}; expected some of {sorted(known)}"
        )
    values = dict(data)
    values["repositories"] = tuple(Path(p) for p in values.get("repositories", ()))
    for key in ("tritonserver_path", "temp_dir"):
        if values.get(key):
            values[key] = Path(values[key])
    if "device" in values:
        values["device"] = Device(values["device"])
    if "kind" in values:
        values["kind"] = FallbackServerKind(values["kind"])
    return FallbackConfig(**values)
