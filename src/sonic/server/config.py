"""Server configuration: a frozen description of what ``sonic serve`` should run."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


class ModelControlMode(enum.StrEnum):
    NONE = "none"  # load every model at start, no load/unload API
    EXPLICIT = "explicit"  # load only through the API (and --load-model)
    POLL = "poll"  # rescan the repositories every repository_poll_s


# Triton's gRPC limit (INT32_MAX), so the same requests fit through both servers.
MAX_GRPC_MESSAGE_BYTES = 2**31 - 1


@dataclass(frozen=True)
class ServerConfig:
    model_repositories: tuple[Path, ...]
    host: str = "127.0.0.1"
    grpc_port: int = 8001  # 0 picks a free port
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()  # explicit mode: loaded at start ("*" loads all)
    repository_poll_s: float = 15.0
    exit_timeout_s: float = 30.0  # drain time for in-flight requests at shutdown
    gpu_count: int = 0
    backend_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    grpc_max_message_bytes: int = MAX_GRPC_MESSAGE_BYTES
    server_name: str = "sonic"

    def __post_init__(self) -> None:
        if not self.model_repositories:
            msg = "at least one model repository is needed"
            raise ValueError(msg)
        if self.repository_poll_s <= 0:
            raise ValueError(f"repository_poll_s must be > 0, got {self.repository_poll_s}")
