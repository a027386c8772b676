"""Retries and failover of one call: which server each try goes to, and what a failure says about it.

A broken connection makes the server dead and a missed deadline suspect (:mod:`sonic.client.health`):
the retry goes to another server first. Other transient errors retry the same server once, then
another. NOT_FOUND, or UNAVAILABLE while another server has the model, from a server that listed the
model refreshes that server's model list: if the model moved, the retry goes where it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sonic.client.config import ClientConfig
from sonic.client.errors import (
    Attempt,
    ClientError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidRequestError,
    NoServerError,
    RetriesExhaustedError,
    ServerError,
    TransientError,
)
from sonic.client.health import Health
from sonic.client.registry import ServerEntry, ServerRegistry
from sonic.client.stats import ClientStatistics
from sonic.protocol.errors import GrpcCode

log = logging.getLogger(__name__)
T = TypeVar("T")
# The statuses that may mean the model moved off the server that answered them.
_MOVED_STATUSES = frozenset({GrpcCode.NOT_FOUND, GrpcCode.UNAVAILABLE})


async def with_retries(
    model: str,
    config: ClientConfig,
    registry: ServerRegistry,
    statistics: ClientStatistics,
    operation: Callable[[ServerEntry], Awaitable[T]],
    first_failure: tuple[ServerEntry, ServerError] | None = None,
) -> tuple[T, int]:
    """Run ``operation`` on a chosen server, retrying transient failures; returns (result, tries).

    ``first_failure``: the first try already went to that server outside this function (the blocking
    fast path of :mod:`sonic.client.blocking`) and failed so; the tries go on as if it had failed here.
    """
    # Made on the first failure: a call that succeeds first time allocates no bookkeeping.
    attempts: list[Attempt] | None = None
    avoid: set[ServerEntry] | None = None
    retry_on: ServerEntry | None = None
    start = 0
    if first_failure is not None:
        entry, exc = first_failure
        if not isinstance(exc, TransientError | InvalidRequestError):
            raise exc  # as a try's other errors: not retried
        attempts, avoid = [], set()
        retry_on = await _failed(model, config, registry, statistics, entry, exc, attempts, avoid, None, 0)
        start = 1
    for index in range(start, config.allowed_tries):
        if index:
            delay_s = config.retry_backoff_s * 2 ** (index - 1)
            await asyncio.sleep(min(delay_s, config.retry_backoff_max_s))  # backoff, not a sync
        try:
            if retry_on is not None and retry_on.healthy:
                entry = retry_on
            else:
                # A first try on a healthy server is picked without a coroutine (every call does it).
                chosen = None if index else registry.first_choice(model)
                entry = chosen or await registry.select(model, avoid or set())
        except NoServerError as exc:
            if not attempts:
                raise
            attempts.append(Attempt("(no server left)", exc))
            break
        entry.outstanding += 1
        try:
            result = await operation(entry)
        except (TransientError, InvalidRequestError) as exc:
            if attempts is None or avoid is None:
                attempts, avoid = [], set()
            retry_on = await _failed(
                model, config, registry, statistics, entry, exc, attempts, avoid, retry_on, index
            )
        else:
            if entry.health is not Health.HEALTHY:  # the common case: no call
                registry.mark_ok(entry)
            statistics.count_success(index + 1)
            return result, index + 1
        finally:
            entry.outstanding -= 1
    statistics.failed += 1
    raise RetriesExhaustedError(model, attempts or [])


async def _failed(
    model: str,
    config: ClientConfig,
    registry: ServerRegistry,
    statistics: ClientStatistics,
    entry: ServerEntry,
    exc: ServerError,
    attempts: list[Attempt],
    avoid: set[ServerEntry],
    retry_on: ServerEntry | None,
    index: int,
) -> ServerEntry | None:
    """Book a failed try (re-raised when it is not worth another); the server the next try goes back to."""
    moved = await _model_moved(model, config, registry, entry, exc)
    if not moved and not isinstance(exc, TransientError):
        raise exc
    attempts.append(Attempt(entry.address, exc))
    statistics.count_failure(exc, moved=moved)
    if isinstance(exc, ConnectionLostError):
        registry.mark_dead(entry, exc)
    elif isinstance(exc, DeadlineExceededError):
        registry.mark_suspect(entry, exc)
    log.info("model '%s' try %d on %s failed: %s", model, index + 1, entry.address, exc)
    if moved or isinstance(exc, ConnectionLostError | DeadlineExceededError) or retry_on is entry:
        avoid.add(entry)
        return None
    return entry  # the first retry goes to the same server


async def _model_moved(
    model: str, config: ClientConfig, registry: ServerRegistry, entry: ServerEntry, exc: ServerError
) -> bool:
    """NOT_FOUND, or UNAVAILABLE while another server has it, for a model ``entry`` listed: read its
    model list again; True when the model is gone from it (the retry goes elsewhere), also when a
    concurrent call's refresh already found it gone."""
    status = exc.status
    if entry.is_fallback:
        return False
    if status is GrpcCode.UNAVAILABLE and isinstance(exc, ConnectionLostError):
        return False
    if status is GrpcCode.UNAVAILABLE and not [e for e in registry.candidates(model) if e is not entry]:
        return False  # nowhere else to go: retry here (a model being reloaded comes back)
    if status not in _MOVED_STATUSES:
        return False
    if model not in entry.models:
        # It listed the model when this try was sent there: a concurrent call's refresh found it gone.
        return True
    now = asyncio.get_running_loop().time()
    if status is GrpcCode.UNAVAILABLE and now - entry.probed_at < config.probe_backoff_s:
        return False  # an overloaded server answers UNAVAILABLE often: its list is read at most this often
    entry.probed_at = now
    try:
        await registry.refresh(entry, config.control_timeout_s)
    except (ClientError, TimeoutError) as error:
        registry.mark_dead(entry, error)
        return True
    if model in entry.models:
        return False
    log.warning("model '%s' is gone from %s (%s): trying elsewhere", model, entry.address, status.name)
    return True
