"""Which servers exist, which models each serves, and which one gets the next request.

CMSSW's TritonService role: at start-up every configured server is asked for its RepositoryIndex;
unreachable ones are skipped with a warning. Among healthy servers that have a model, the preferred
one, else the one with the fewest requests in flight, is chosen; the process's local fallback server
only when no remote one can. A server whose connection breaks, or that misses a deadline, moves
down the health state machine of :mod:`sonic.client.health` and is probed back in the background.
A Kubernetes headless Service name stands for every replica behind it: :func:`resolve_services`
turns it into one address per DNS record, for client-side balancing where a site runs no proxy.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sonic.client.config import ClientConfig
from sonic.client.errors import ClientError, NoServerError
from sonic.client.health import Health, ProbePolicy, Prober
from sonic.client.shm import RegionPool
from sonic.client.transport.base import Transport
from sonic.protocol.wire import ModelState

log = logging.getLogger(__name__)
# The index states that put a model on a server's list: READY, or none given (asked for ready models only).
_LISTED = frozenset({ModelState.READY, ModelState.NONE})

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
    preferred: bool = False  # CMSSW's preferredServer: chosen first while it is healthy
    health: Health = Health.HEALTHY
    probe_at: float | None = None
    probed_at: float = -math.inf
    probe_failures: int = 0
    outstanding: int = 0  # requests in flight from this client
    shm: RegionPool | None = None
    shm_refused: bool = False  # the server said no once: plain gRPC from then on
    down_reason: str = ""  # why it was skipped or taken out, for the error a caller finally sees

    @property
    def address(self) -> str:
        return self.transport.address

    @property
    def healthy(self) -> bool:
        """Takes traffic: HEALTHY, or SUSPECT when nothing better is left."""
        health = self.health
        return health is Health.HEALTHY or health is Health.SUSPECT  # no set built per call

    def describe(self) -> str:
        if self.health is Health.HEALTHY:
            return f"{self.address} (up)"
        return f"{self.address} ({self.health.value}: {self.down_reason or 'unknown'})"


class ServerRegistry:
    """The servers of one client, their health and models; owns the probing task (see :mod:`.health`)."""

    def __init__(
        self,
        transports: Sequence[Transport],
        *,
        control_timeout_s: float,
        probe: ProbePolicy | None = None,
        preferred_server: str = "",
        start_fallback: Callable[[str], Awaitable[Transport | None]] | None = None,
    ) -> None:
        self.entries = [ServerEntry(t, preferred=t.address == preferred_server) for t in transports]
        self._timeout_s = control_timeout_s
        self._start_fallback = start_fallback
        self._fallback_lock = asyncio.Lock()
        self.fallback: ServerEntry | None = None
        self.prober: Prober[ServerEntry] = Prober(probe or ProbePolicy(), self._probe)

    @classmethod
    def for_client(
        cls,
        transports: Sequence[Transport],
        config: ClientConfig,
        start_fallback: Callable[[str], Awaitable[Transport | None]],
    ) -> ServerRegistry:
        """The registry a client's configuration describes (``start_fallback`` used if it enables one)."""
        return cls(
            transports,
            control_timeout_s=config.control_timeout_s,
            probe=ProbePolicy(config.probe_backoff_s, config.probe_backoff_max_s, config.probe_timeout_s),
            preferred_server=config.preferred_server,
            start_fallback=start_fallback if config.fallback.enable else None,
        )

    async def discover(self) -> None:
        """Ask every server for its ready models, at once; the unreachable are marked dead and probed."""
        await asyncio.gather(*(self._discover_one(e) for e in self.entries))

    async def _discover_one(self, entry: ServerEntry) -> None:
        try:
            await self.refresh(entry, self._timeout_s)
        except (ClientError, TimeoutError) as exc:
            log.warning(
                "server %s skipped: unreachable at start-up (%s)", entry.address, str(exc) or "timeout"
            )
            self.mark_dead(entry, exc)
            return
        log.info("server %s serves %s", entry.address, sorted(entry.models))

    async def refresh(self, entry: ServerEntry, timeout_s: float) -> None:
        """Read the server's ready models again (RepositoryIndex)."""
        index = await asyncio.wait_for(entry.transport.repository_index(), timeout_s)
        entry.models = {row.name for row in index if row.state in _LISTED}

    async def _probe(self, entry: ServerEntry) -> bool:
        """Health check, then the model list: both within the probe timeout."""
        timeout_s = self.prober.policy.timeout_s
        try:
            ready = await asyncio.wait_for(entry.transport.server_ready(), timeout_s)
            if ready:
                await self.refresh(entry, timeout_s)
        except (ClientError, TimeoutError) as exc:
            entry.down_reason = f"probe failed: {str(exc) or 'no answer within the probe timeout'}"
            log.debug("server %s: %s", entry.address, entry.down_reason)
            return False
        if not ready:
            entry.down_reason = "probe: the server is not ready"
            return False
        log.warning("server %s is back (serves %s)", entry.address, sorted(entry.models))
        entry.down_reason = ""
        return True

    def mark_dead(self, entry: ServerEntry, reason: BaseException) -> None:
        """The connection broke or was refused: no traffic until a probe succeeds."""
        if entry.health is Health.DEAD:
            return
        if entry.health is not Health.PROBING:
            entry.health = Health.DEAD
            log.warning("server %s taken out: %s", entry.address, reason)
        entry.down_reason = str(reason) or type(reason).__name__
        self.prober.schedule(entry)

    def mark_suspect(self, entry: ServerEntry, reason: BaseException) -> None:
        """A missed deadline: last choice until a probe (started now) says otherwise. (A failed keepalive
        closes the connection: that is mark_dead.)"""
        if entry.health is Health.HEALTHY:
            entry.health = Health.SUSPECT
            entry.down_reason = str(reason)
            log.warning("server %s suspect: %s", entry.address, reason)
            self.prober.schedule(entry, now=True)

    def mark_ok(self, entry: ServerEntry) -> None:
        """A call succeeded: nothing to do unless it was SUSPECT (the common case costs one compare)."""
        if entry.health is Health.SUSPECT:
            entry.health = Health.HEALTHY
            entry.down_reason = ""

    def candidates(self, model: str) -> list[ServerEntry]:
        return [e for e in self.entries if e.healthy and model in e.models and not e.is_fallback]

    def _down_with(self, model: str) -> list[ServerEntry]:
        return [e for e in self.entries if not e.healthy and model in e.models]

    def first_choice(self, model: str) -> ServerEntry | None:
        """What :meth:`select` picks for a first try while some HEALTHY remote server has ``model`` and
        none is SUSPECT, without a coroutine or lists (every call's path); None: ask :meth:`select`."""
        chosen: ServerEntry | None = None
        for entry in self.entries:
            if entry.is_fallback or model not in entry.models:
                continue
            health = entry.health
            if health is Health.SUSPECT:
                return None  # rare: select's full order (preferred, then HEALTHY first) decides
            if health is Health.HEALTHY and (
                chosen is None
                or (not entry.preferred, entry.outstanding) < (not chosen.preferred, chosen.outstanding)
            ):
                chosen = entry
        return chosen

    async def select(self, model: str, avoid: set[ServerEntry], allow_fallback: bool = True) -> ServerEntry:
        """The server for the next try of a call of ``model``, in this order: a healthy remote server
        not in ``avoid`` (the preferred one, else the one with the fewest requests in flight); a
        suspect one; a dead one whose probe, started now, brings it back; the fallback; ``avoid``."""
        remote = self.candidates(model)
        if not remote:
            await self.refresh_models()  # a model that moved back (rate-limited)
            remote = self.candidates(model)
        fresh = [e for e in remote if e not in avoid]
        if fresh:
            return _best(fresh)
        if not remote:
            back = await self._probe_down(model)
            if back is not None:
                return back
        if allow_fallback and not remote:
            fallback = await self._fallback_for(model)
            if fallback is not None:
                return fallback
        if remote:
            return _best(remote)
        addresses = ", ".join(e.describe() for e in self.entries) or "none"
        raise NoServerError(
            f"no reachable server has model '{model}' (servers: {addresses}); "
            + (
                "the fallback server does not serve it either"
                if self._start_fallback
                else "no fallback configured"
            )
        )

    async def _probe_down(self, model: str) -> ServerEntry | None:
        """No usable server: probe the dead ones that served ``model`` now (rate-limited by the
        backoff), and return one that came back. A restarted server gets traffic as soon as a
        caller needs it, not only at its next scheduled probe."""
        pending = [e for e in self._down_with(model) if not e.is_fallback and self.prober.probe_soon(e)]
        if not pending:
            return None
        await self.prober.verdicts(pending)
        back = [e for e in self.candidates(model) if e in pending]
        return _best(back) if back else None

    async def refresh_models(self) -> None:
        """No healthy server lists a model: read every healthy server's list again (a model that
        moved back). At most once per longest probe backoff per server: a job whose model only the
        fallback serves must not ask every remote server on every call."""
        now = asyncio.get_running_loop().time()
        every_s = self.prober.policy.backoff_max_s
        stale = [e for e in self.entries if e.healthy and not e.is_fallback and now - e.probed_at >= every_s]
        for entry in stale:
            entry.probed_at = now
        results = await asyncio.gather(
            *(self.refresh(e, self._timeout_s) for e in stale), return_exceptions=True
        )
        for entry, result in zip(stale, results, strict=True):
            if isinstance(result, ClientError | TimeoutError):
                self.mark_dead(entry, result)

    async def _fallback_for(self, model: str) -> ServerEntry | None:
        if self._start_fallback is None:
            return None
        async with self._fallback_lock:
            if self.fallback is None or model not in self.fallback.models or not self.fallback.healthy:
                # Starts the process's fallback server (once) and loads the model into it; a new
                # transport when this client had none to it yet.
                transport = await self._start_fallback(model)
                if transport is not None:
                    self.fallback = ServerEntry(transport, is_fallback=True)
                    self.entries.append(self.fallback)
                if self.fallback is not None:
                    self.fallback.health = Health.HEALTHY  # just started or checked by ensure()
                    await self._discover_one(self.fallback)
        fallback = self.fallback
        return fallback if fallback is not None and model in fallback.models and fallback.healthy else None

    async def close(self) -> None:
        """Stop probing; release every server's regions and connection, each even when another fails."""
        await self.prober.close()
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


def _best(entries: list[ServerEntry]) -> ServerEntry:
    """Preferred first, then HEALTHY before SUSPECT, then the fewest requests in flight."""
    return min(entries, key=lambda e: (not e.preferred, e.health is not Health.HEALTHY, e.outstanding))
