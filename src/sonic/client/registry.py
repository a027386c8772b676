"""Which servers exist, which models each serves, and which one gets the next request.

CMSSW's TritonService role: at start-up every configured server is asked for its RepositoryIndex;
unreachable ones are skipped with a warning. Among healthy servers that have a model, the one with
the fewest requests in flight is chosen; the local fallback server only when no remote one can.
A server whose connection breaks is taken out for the rest of the job.
A Kubernetes headless Service name stands for every replica behind it: :func:`resolve_services`
turns it into one address per DNS record, for client-side balancing where a site runs no proxy.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sonic.client.errors import ClientError, NoServerError
from sonic.client.shm import RegionPool
from sonic.client.transport.base import Transport

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (A and AAAA records), in the resolver's order, once each."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NoServerError(f"service '{host}:{port}' does not resolve: {exc}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve_services(services: Sequence[str], resolve: Resolver = resolve_host) -> list[str]:
    """``name:port`` of headless Services → ``address:port`` of every replica behind each."""
    addresses: list[str] = []
    for service in services:
        host, _, port = service.rpartition(":")
        found = await resolve(host, int(port))
        addresses.extend(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in found)
    log.info("services %s resolved to %s", list(services), addresses)
    return addresses


@dataclass(eq=False)
class ServerEntry:
    transport: Transport
    models: set[str] = field(default_factory=set)
    is_fallback: bool = False
    healthy: bool = True
    outstanding: int = 0  # requests in flight from this client
    shm: RegionPool | None = None
    shm_refused: bool = False  # the server said no once: plain gRPC from then on
    down_reason: str = ""  # why it was skipped or taken out, for the error a caller finally sees

    @property
    def address(self) -> str:
        return self.transport.address


class ServerRegistry:
    def __init__(
        self,
        transports: Sequence[Transport],
        *,
        control_timeout_s: float,
        start_fallback: Callable[[], Awaitable[Transport]] | None = None,
    ) -> None:
        self.entries = [ServerEntry(t) for t in transports]
        self._timeout_s = control_timeout_s
        self._start_fallback = start_fallback
        self._fallback_lock = asyncio.Lock()
        self.fallback: ServerEntry | None = None

    async def discover(self) -> None:
        """Ask every server for its ready models, at once; the unreachable are marked unhealthy."""
        await asyncio.gather(*(self._discover_one(e) for e in self.entries))

    async def _discover_one(self, entry: ServerEntry) -> None:
        try:
            index = await asyncio.wait_for(entry.transport.repository_index(), self._timeout_s)
        except (ClientError, TimeoutError) as exc:
            entry.healthy = False
            entry.down_reason = str(exc) or "timeout"
            log.warning("server %s skipped: unreachable at start-up (%s)", entry.address, entry.down_reason)
            return
        entry.models = {row.name for row in index if row.state in {"READY", ""}}
        log.info("server %s serves %s", entry.address, sorted(entry.models))

    def mark_dead(self, entry: ServerEntry, reason: ClientError) -> None:
        if entry.healthy:
            entry.healthy = False
            entry.down_reason = str(reason)
            log.warning("server %s taken out: %s", entry.address, reason)

    def candidates(self, model: str) -> list[ServerEntry]:
        return [e for e in self.entries if e.healthy and model in e.models and not e.is_fallback]

    async def select(self, model: str, avoid: set[ServerEntry], allow_fallback: bool = True) -> ServerEntry:
        """Least outstanding healthy remote server not in ``avoid``; then the fallback; then ``avoid``."""
        remote = self.candidates(model)
        fresh = [e for e in remote if e not in avoid]
        if fresh:
            return min(fresh, key=lambda e: e.outstanding)
        if allow_fallback and not remote:
            fallback = await self._fallback_for(model)
            if fallback is not None:
                return fallback
        if remote:
            return min(remote, key=lambda e: e.outstanding)
        addresses = (
            ", ".join(
                f"{e.address} (up)" if e.healthy else f"{e.address} (down: {e.down_reason or 'unknown'})"
                for e in self.entries
            )
            or "none"
        )
        raise NoServerError(
            f"no reachable server has model '{model}' (servers: {addresses}); "
            + (
                "the fallback server does not serve it either"
                if self._start_fallback
                else "no fallback configured"
            )
        )

    async def _fallback_for(self, model: str) -> ServerEntry | None:
        if self._start_fallback is None:
            return None
        async with self._fallback_lock:
            if self.fallback is None or not self.fallback.healthy:
                transport = await self._start_fallback()
                entry = ServerEntry(transport, is_fallback=True)
                await self._discover_one(entry)
                self.fallback = entry
                self.entries.append(entry)
        return self.fallback if model in self.fallback.models and self.fallback.healthy else None

    async def close(self) -> None:
        """Release every server's regions and connection, each even when another one fails."""
        errors: list[BaseException] = []
        for entry in self.entries:
            for step in (entry.shm.close if entry.shm is not None else None, entry.transport.close):
                if step is None:
                    continue
                try:
                    await step()
                except Exception as exc:  # noqa: BLE001  (reported after the others are closed)
                    errors.append(exc)
        if errors:
            raise errors[0]
