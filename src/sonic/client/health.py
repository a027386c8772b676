"""Server health as a state machine, and the one background task per registry that probes servers back.

States of one server, as the client sees it::

    HEALTHY --deadline missed / keepalive failed--> SUSPECT --probe fails--> DEAD
       ^                                              |                       |
       |<-------- a call succeeds, or the probe does -+                  backoff elapsed
       |                                                                      v
       +<------------------- probe succeeds (health, then RepositoryIndex) - PROBING
                                                     probe fails: DEAD, backoff doubled

- HEALTHY servers take traffic; SUSPECT ones only when no HEALTHY server has the model (a retry after a
  deadline goes to another server first) and get a probe soon; DEAD and PROBING servers take none.
- A broken or refused connection makes a server DEAD at once.
- A probe is ``ServerReady`` and then ``RepositoryIndex`` (which also refreshes the server's model
  list), each within ``probe_timeout_s``. Failed probes back off exponentially from ``probe_backoff_s``
  to ``probe_backoff_max_s``, with +-20 % jitter so many clients do not probe a restarted server in step.

:class:`Prober` is the timer: one task per registry that sleeps until the earliest due probe (or until
woken by a new one), runs the due probes concurrently, and is cancelled on close. No task exists while
every server is healthy.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

JITTER = 0.2  # probe delays vary by this fraction either way


class Health(enum.Enum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"  # missed a deadline or a keepalive: last choice, probed soon
    DEAD = "dead"  # connection broken or refused, or a probe failed: no traffic until a probe succeeds
    PROBING = "probing"  # a probe is running


@dataclass(frozen=True)
class ProbePolicy:
    backoff_s: float = 0.25  # first probe this long after the failure
    backoff_max_s: float = 4.0  # delays double up to this
    timeout_s: float = 2.0  # each probe call

    def delay(self, failures: int, rng: random.Random) -> float:
        """Delay before the probe that follows ``failures`` failed ones (0: the first probe)."""
        base = min(self.backoff_s * 2**failures, self.backoff_max_s)
        return float(base * rng.uniform(1 - JITTER, 1 + JITTER))


class Probed(Protocol):
    """What the prober needs of a server: its state and its probe times (ServerEntry has them)."""

    health: Health
    probe_at: float | None  # loop time of the next probe; None: none scheduled
    probed_at: float  # loop time the last probe ended (-inf: never)
    probe_failures: int


E = TypeVar("E", bound=Probed)


class Prober(Generic[E]):
    """The one timer task of a registry: runs ``probe(entry)`` for each entry when its time comes.

    ``probe`` returns True when the server is back; the prober then marks it HEALTHY, else DEAD with
    the next try scheduled after a longer backoff.
    """

    def __init__(self, policy: ProbePolicy, probe: Callable[[E], Awaitable[bool]]) -> None:
        self.policy = policy
        self._probe = probe
        self._entries: list[E] = []
        self._wake: asyncio.Event | None = None  # a probe was scheduled: recompute the next due time
        self._probed: asyncio.Event | None = None  # a probe ended: for wait_probed()
        self._task: asyncio.Task[None] | None = None
        self._rng = random.Random()  # noqa: S311  (jitter, not security)
        self._closed = False

    def schedule(self, entry: E, *, now: bool = False) -> None:
        """Probe ``entry`` after its backoff (or at once): keeps an earlier time already scheduled."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        delay = 0.0 if now else self.policy.delay(entry.probe_failures, self._rng)
        at = loop.time() + delay
        if entry.probe_at is None or at < entry.probe_at:
            entry.probe_at = at
        if entry not in self._entries:
            self._entries.append(entry)
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="sonic-client-prober")

    def probe_soon(self, entry: E) -> bool:
        """A caller found no usable server: is a verdict on ``entry`` coming soon? A probe is started
        now, unless one ended under ``backoff_s`` ago (a server that is down is not probed by every
        call); then only a running probe, or one due within the probe timeout, is worth waiting for."""
        now = asyncio.get_running_loop().time()
        if self._closed:
            return False
        if entry.health is Health.PROBING:
            return True
        if now - entry.probed_at < self.policy.backoff_s:
            return entry.probe_at is not None and entry.probe_at - now <= self.policy.timeout_s
        self.schedule(entry, now=True)
        return True

    async def wait_probed(self, timeout_s: float) -> None:
        """Until the next probe ends, or ``timeout_s``."""
        if self._probed is None:
            self._probed = asyncio.Event()
        with suppress(TimeoutError):
            await asyncio.wait_for(self._probed.wait(), timeout_s)

    async def verdicts(self, entries: list[E]) -> None:
        """Until a probe of each of ``entries`` ended (bounded: two probe calls' time plus the wait)."""
        loop = asyncio.get_running_loop()
        before = [e.probed_at for e in entries]
        deadline = loop.time() + 3 * self.policy.timeout_s
        while any(e.probed_at == b for e, b in zip(entries, before, strict=True)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await self.wait_probed(remaining)

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while self._entries:
            now = loop.time()
            due = [e for e in self._entries if e.probe_at is not None and e.probe_at <= now]
            if due:
                await asyncio.gather(*(self._probe_one(e) for e in due))
                continue
            self._wake.clear()
            times = [e.probe_at for e in self._entries if e.probe_at is not None]
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(times) - now if times else None)

    async def _probe_one(self, entry: E) -> None:
        entry.probe_at = None
        entry.health = Health.PROBING
        try:
            ok = await self._probe(entry)
        except Exception:  # a bug in a probe must not stop the timer of every server
            log.exception("probe failed unexpectedly")
            ok = False
        entry.probed_at = asyncio.get_running_loop().time()
        if ok:
            entry.health = Health.HEALTHY
            entry.probe_failures = 0
            self._entries.remove(entry)
        else:
            entry.health = Health.DEAD
            entry.probe_failures += 1
            self.schedule(entry)
        probed, self._probed = self._probed, None
        if probed is not None:
            probed.set()

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
