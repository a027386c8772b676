"""Servers for a benchmark, started through :mod:`sonic.launch` and all stopped by PID on the way out.

    with ServerSet() as servers:
        servers.add("sonic", ServerProcess.start([repository]))
        servers.add("triton", TritonProcess.start([repository], models=["identity"]))
        for name in servers: ... servers[name].grpc_address, servers[name].pid ...

Each server joins the set as soon as it runs, so one that fails to start later still stops the others.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from sonic.launch import ServerHandle, ServerProcess
from sonic.protocol.model_config import parse_config_text


class ServerSet:
    """Named running servers; leaving the ``with`` block stops them, the last started first."""

    def __init__(self) -> None:
        self._servers: dict[str, ServerHandle] = {}

    def add(self, name: str, server: ServerHandle) -> ServerHandle:
        if name in self._servers:
            server.stop()
            raise ValueError(f"server {name!r} is already in the set")
        self._servers[name] = server
        return server

    def replace(self, name: str, server: ServerHandle) -> ServerHandle:
        """A restarted server in place of one that died (which is stopped, its PID reaped)."""
        old = self._servers.pop(name)
        old.stop()
        return self.add(name, server)

    def __getitem__(self, name: str) -> ServerHandle:
        return self._servers[name]

    def __contains__(self, name: object) -> bool:
        return name in self._servers

    def __iter__(self) -> Iterator[str]:
        return iter(self._servers)

    def __len__(self) -> int:
        return len(self._servers)

    def addresses(self) -> dict[str, str]:
        return {name: server.grpc_address for name, server in self._servers.items()}

    def stop(self) -> None:
        while self._servers:
            _, server = self._servers.popitem()
            server.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def parse_named(items: Sequence[str], what: str) -> dict[str, str]:
    """``NAME=VALUE`` options (``--tree base=src``) as a dict, with a clear error for a bad one."""
    named: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"{what} {item!r}: expected NAME=VALUE")
        named[name] = value
    return named


def start_trees(
    servers: ServerSet,
    trees: Mapping[str, str],
    repositories: Sequence[Path],
    *,
    extra_args: Sequence[str] = (),
    per_tree_args: Mapping[str, str] | None = None,
) -> None:
    """One ``sonic serve`` per source tree (``NAME -> path of a src/ folder``) into ``servers``: the
    A/B design, every tree's server running at once with the same repositories and flags."""
    for name, src in trees.items():
        more = shlex.split((per_tree_args or {}).get(name, ""))
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        servers.add(name, ServerProcess.start(list(repositories), env=env, extra_args=[*extra_args, *more]))


def set_cpu_instances(repository: Path, model: str, instances: int) -> None:
    """``model``'s config in ``repository`` with exactly ``instances`` CPU instances, whatever the server's or
    the tree's default (every server or tree of a comparison runs the same count)."""
    path = repository / model / "config.pbtxt"
    config = parse_config_text(path.read_text(), model)
    config.ClearField("instance_group")
    config.instance_group.add(count=instances, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    path.write_text(text_format.MessageToString(config))


def set_max_batch_size(repository: Path, model: str, rows: int) -> None:
    """``model``'s config in ``repository`` with ``max_batch_size`` at least ``rows`` (a larger tensor
    than its own configuration takes)."""
    path = repository / model / "config.pbtxt"
    config = parse_config_text(path.read_text(), model)
    config.max_batch_size = max(config.max_batch_size, rows)
    path.write_text(text_format.MessageToString(config))
