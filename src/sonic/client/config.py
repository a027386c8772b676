"""Client configuration: frozen, picklable, read from keyword arguments, a TOML file or the environment.

The environment is read only in :meth:`ClientConfig.from_env`:

- ``SONIC_SERVERS``: ``host:port,host:port``
- ``SONIC_SERVICES``: ``name:port,...``: each name (a Kubernetes headless Service) is resolved when the
  client connects, and every address it resolves to is one server
- ``SONIC_CONFIG``: a TOML file (see :meth:`ClientConfig.from_toml`); ``SONIC_SERVERS`` adds to its list
- ``SONIC_TOKEN``: bearer token sent with every call
- ``SONIC_FALLBACK_REPOSITORY``: model repository of the local fallback server (enables it)
- ``SONIC_SHARED_MEMORY``: ``auto`` (default), ``system`` or ``off``
- ``SONIC_TRANSPORT``: ``native`` (default) or ``grpcio``
"""

from __future__ import annotations

import enum
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
    NATIVE = "native"  # our HTTP/2 gRPC client (sonic.client.transport.h2)
    GRPCIO = "grpcio"  # grpc aio, with ModelStreamInfer for small requests (sonic.client.transport.grpc)


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


@dataclass(frozen=True)
class ClientConfig:
    servers: tuple[str, ...] = ()
    # Headless Services (``name:port``): one server per DNS address, resolved when the client connects.
    services: tuple[str, ...] = ()
    timeout_s: float | None = None  # per-request deadline; None: none
    allowed_tries: int = 3  # total attempts per request, the first included
    retry_backoff_s: float = 0.05  # delay before the second try, doubled each time
    retry_backoff_max_s: float = 2.0
    max_in_flight: int = 64  # requests on the wire at once, per client
    # >0: concurrent calls with the same input shapes are merged into batched requests, at most this many
    # merged requests in flight per shape (see sonic.client.coalesce); 0: every call is its own request.
    coalesce_in_flight: int = 0
    transport: TransportKind = TransportKind.NATIVE
    stream_max_bytes: int = 65536  # grpcio transport: smaller requests share one ModelStreamInfer stream
    compression: Compression = Compression.NONE
    tls: TlsConfig | None = None
    token: str = ""
    shared_memory: SharedMemoryMode = SharedMemoryMode.AUTO
    shm_min_bytes: int = 65536  # smaller requests (inputs and outputs) skip shared memory
    control_timeout_s: float = 10.0  # metadata, discovery and shared-memory calls (not inference)
    verbose: bool = False  # server-side timing breakdown per call (ModelStatistics deltas)
    fallback: FallbackConfig = field(default_factory=FallbackConfig)

    def __post_init__(self) -> None:
        if self.allowed_tries < 1:
            raise ValueError(f"allowed_tries must be >= 1, got {self.allowed_tries}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight}")
        for address in self.servers:
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
