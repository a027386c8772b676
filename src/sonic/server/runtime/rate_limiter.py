"""Triton's rate limiter (``--rate-limit execution_count``): instances run only when their resources are free.

Each model instance may declare ``instance_group.rate_limiter { resources [...] priority: P }``. Before an
instance executes a batch it acquires its resources from one server-wide pool and gives them back when the
execution ends, so models that together would exhaust memory do not all run at once.

As Triton 2.51 (each rule checked against the real server):
- Without ``--rate-limit-resource`` a resource has as many copies as the largest count any loaded instance
  asks for (per device; one pool for ``global`` resources), so every instance can run alone.
- With one or more ``--rate-limit-resource NAME:COUNT[:DEVICE]`` the given counts are the pool and every
  resource not given has none; an instance that asks for more than its pool can ever hold fails to load
  ("Resource count for "R" is limited to N which will prevent scheduling ...").
- Which waiting instance runs next: the lowest ``priority * executions so far`` (priority 0 counts as 1), so
  an instance of priority 2 gets half the turns of one of priority 1 while both wait. Ties go to the one
  that has waited longest.

Waiting is on the instance thread, never on the event loop: an instance asks for its resources only once a
batch is ready for it (:mod:`.executor`), and a waiter blocks a later one only when they need a resource
in common, so an instance that needs a lot is not starved by small ones and does not hold up others.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InvalidArgumentError

T = TypeVar("T")

CPU_DEVICE = -1  # the device key of KIND_CPU instances (explicit counts without a device apply to it too)


@dataclass(frozen=True)
class ResourceNeed:
    name: str
    count: int
    is_global: bool = False


@dataclass(frozen=True)
class InstanceLimits:
    """What one instance needs before it runs, from its group's ``rate_limiter``."""

    resources: tuple[ResourceNeed, ...]
    priority: int
    device: int  # CPU_DEVICE or a GPU id

    @classmethod
    def from_group(cls, group: model_config_pb2.ModelInstanceGroup, device: int) -> InstanceLimits:
        limiter = group.rate_limiter
        needs = (ResourceNeed(r.name, r.count, getattr(r, "global")) for r in limiter.resources)
        return cls(tuple(needs), limiter.priority, device)


@dataclass(frozen=True)
class ResourceCount:
    """One ``--rate-limit-resource NAME:COUNT[:DEVICE]``; ``device`` None: every device."""

    name: str
    count: int
    device: int | None = None

    @classmethod
    def parse(cls, text: str) -> ResourceCount:
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise ValueError(f"--rate-limit-resource={text}: expected <name>:<count>[:<device>]")
        try:
            count = int(parts[1])
            device = int(parts[2]) if len(parts) == 3 else None
        except ValueError:
            raise ValueError(f"--rate-limit-resource={text}: count and device must be integers") from None
        if count < 0 or (device is not None and device < 0):
            raise ValueError(f"--rate-limit-resource={text}: count and device must be >= 0")
        return cls(parts[0], count, device)


Key = tuple[str, int | None]  # (resource name, device; None for a global resource)


def _key(need: ResourceNeed, device: int) -> Key:
    return (need.name, None if need.is_global else device)


@dataclass(eq=False)
class Waiter:
    """An instance with a batch ready, waiting for its resources."""

    limits: InstanceLimits
    turns: int  # executions it was granted before
    arrival: int
    granted: threading.Event


def choose_grants(waiting: Iterable[Waiter], pool: Mapping[Key, int], in_use: dict[Key, int]) -> list[Waiter]:
    """The waiters to run now, lowest ``priority * turns`` first; their needs are added to ``in_use``.

    A waiter that does not fit holds its resources' place in line: later ones that need any of them wait
    behind it (no starvation), the others may go ahead (no needless blocking).
    """
    granted: list[Waiter] = []
    blocked: set[Key] = set()
    for waiter in sorted(waiting, key=lambda w: (max(w.limits.priority, 1) * w.turns, w.arrival)):
        needs = [(_key(need, waiter.limits.device), need.count) for need in waiter.limits.resources]
        if any(key in blocked for key, _ in needs):
            continue
        if all(in_use.get(key, 0) + count <= pool.get(key, 0) for key, count in needs):
            for key, count in needs:
                in_use[key] = in_use.get(key, 0) + count
            granted.append(waiter)
        else:
            blocked.update(key for key, _ in needs)
    return granted


class RateLimiter:
    """The server-wide pool of rate-limiter resources and the instances waiting for them."""

    def __init__(self, explicit: Iterable[ResourceCount] = ()) -> None:
        self._explicit = tuple(explicit)
        self._lock = threading.Lock()
        self._registered: dict[object, InstanceLimits] = {}  # by owner (a ModelInstance)
        self._turns: dict[object, int] = {}  # executions granted so far, by owner
        self._in_use: dict[Key, int] = {}
        self._waiting: list[Waiter] = []
        self._arrivals = itertools.count()

    # --- load and unload (event loop) ---------------------------------------------------------------------

    def register(self, owner: object, limits: InstanceLimits) -> None:
        """Add an instance; raise InvalidArgumentError (Triton's words) when the pool can never run it."""
        with self._lock:
            pool = self._pool([*self._registered.values(), limits])
            for need in limits.resources:
                available = pool.get(_key(need, limits.device), 0)
                if need.count > available:
                    raise InvalidArgumentError(
                        f'Resource count for "{need.name}" is limited to {available} which will '
                        "prevent scheduling of one or more model instances, the minimum required count is "
                        f"{need.count}"
                    )
            self._registered[owner] = limits
            self._turns[owner] = 0

    def unregister(self, owner: object) -> None:
        with self._lock:
            self._registered.pop(owner, None)
            self._turns.pop(owner, None)
            self._grant()  # a smaller default pool may change nothing, but a waiter may fit now

    def pool(self) -> Mapping[Key, int]:
        """Copies of each resource (name, device or None for global) the loaded instances share."""
        with self._lock:
            return self._pool(list(self._registered.values()))

    # --- around one execution (instance thread) -----------------------------------------------------------

    def acquire(self, owner: object) -> None:
        """Block until ``owner``'s resources are granted (at once when it needs none)."""
        with self._lock:
            limits = self._registered[owner]
            waiter = Waiter(limits, self._turns[owner], next(self._arrivals), threading.Event())
            self._turns[owner] += 1
            self._waiting.append(waiter)
            self._grant()
        waiter.granted.wait()

    def release(self, owner: object) -> None:
        with self._lock:
            limits = self._registered.get(owner)
            if limits is not None:
                for need in limits.resources:
                    self._in_use[_key(need, limits.device)] -= need.count
            self._grant()

    # --- under the lock -----------------------------------------------------------------------------------

    def _pool(self, instances: list[InstanceLimits]) -> dict[Key, int]:
        if self._explicit:
            return self._explicit_pool(instances)
        pool: dict[Key, int] = {}
        for limits in instances:
            for need in limits.resources:
                key = _key(need, limits.device)
                pool[key] = max(pool.get(key, 0), need.count)
        return pool

    def _explicit_pool(self, instances: list[InstanceLimits]) -> dict[Key, int]:
        pool: dict[Key, int] = {}
        for limits in instances:
            for need in limits.resources:
                key = _key(need, limits.device)
                for given in self._explicit:
                    # A device given on the command line names a GPU; without one it is every device.
                    if given.name == need.name and (given.device is None or key[1] in (None, given.device)):
                        pool[key] = given.count
        return pool

    def _grant(self) -> None:
        pool = self._pool(list(self._registered.values()))
        for waiter in choose_grants(self._waiting, pool, self._in_use):
            self._waiting.remove(waiter)
            waiter.granted.set()


def call_limited(limiter: RateLimiter | None, owner: object, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` once ``owner``'s resources are granted (on the instance thread)."""
    if limiter is None:
        return function(*args)
    limiter.acquire(owner)
    try:
        return function(*args)
    finally:
        limiter.release(owner)


def no_active_instance(model: str) -> str:
    # Triton 2.51 loads such a model READY and crashes (SIGSEGV) on its first request: answer instead.
    return (
        f"model '{model}' has no active instance: every instance group is passive "
        "(instance_group.passive: loaded, but never given requests)"
    )
