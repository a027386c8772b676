"""The asyncio client: inputs checked against the model, requests split, sent, retried and failed over.

One :class:`AsyncClient` serves one model. It connects lazily on first use (so it pickles as
configuration and reconnects on each Dask worker), asks every configured server which models it
has, and sends each request to the preferred server, else the healthy one with the fewest requests
in flight. Transient failures are retried (same server once, then another, then the process's local
fallback server). A server whose connection breaks, or that misses a deadline, moves down the health
state machine of :mod:`sonic.client.health` and is probed back in the background; its requests go
elsewhere meanwhile. A model that moved (NOT_FOUND from a server that listed it) is looked for on
the other servers. :attr:`AsyncClient.statistics` counts what happened.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from sonic.client import batching, checksum
from sonic.client.batching import Parameters
from sonic.client.cleanup import exit_cleanup
from sonic.client.coalesce import Coalescer
from sonic.client.config import ClientConfig, SharedMemoryMode
from sonic.client.errors import ClientStateError, ConnectionLostError, ServerError
from sonic.client.fallback import FallbackUse
from sonic.client.health import Health
from sonic.client.inflight import InFlight
from sonic.client.plans import CallPlan, FirstTry, PlanCache, signature
from sonic.client.registry import ServerEntry, ServerRegistry, resolve_services
from sonic.client.results import Arrays, CallTiming, InferResult, verbose_log, verbose_summary
from sonic.client.retries import with_retries
from sonic.client.stats import ClientStatistics
from sonic.client.transport.base import ModelInfo, Transport
from sonic.client.transport.factory import open_transport
from sonic.client.tries import Tries
from sonic.client.zerocopy import ShmRequest, borrow_region, plan
from sonic.protocol.types import WireRequest, WireResponse

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClientState(enum.Enum):
    NEW = "new"  # not connected yet: the first call discovers the servers
    OPEN = "open"
    CLOSED = "closed"


class AsyncClient:
    def __init__(
        self,
        model: str,
        config: ClientConfig | None = None,
        *,
        version: str = "",
        transports: Sequence[Transport] | None = None,
        model_config: Path | None = None,
    ) -> None:
        """``transports`` replaces the gRPC connections to ``config.servers`` (tests: in-memory).

        ``model_config``: the local copy of the model's ``config.pbtxt`` (CMSSW's ``modelConfigPath``):
        the server's ``checksum`` agent digests are checked against the files next to it
        (:mod:`sonic.client.checksum`); a mismatch is a :class:`ModelVersionError` naming the file.
        """
        self.model = model
        self.version = version
        self.config = config or ClientConfig()
        self.model_config = model_config
        self.statistics = ClientStatistics()
        if self.config.handle_signals:
            exit_cleanup().install_signal_handlers()
        self._given_transports = list(transports) if transports is not None else None
        self._state = ClientState.NEW
        self._registry: ServerRegistry | None = None
        self._open_lock: asyncio.Lock | None = None
        self._in_flight: InFlight | None = None
        self._info: ModelInfo | None = None
        self._fallback = FallbackUse(self.config.fallback)
        self._coalescer: Coalescer | None = None
        self._ids = itertools.count()
        self._tries = Tries(model, version, self.config)
        self._plans = PlanCache(model, version, self.config)  # checked input signatures

    @classmethod
    def from_env(cls, model: str, *, version: str = "", **overrides: Any) -> Self:
        return cls(model, ClientConfig.from_env(**overrides), version=version)

    # --- pickling: configuration only, reconnect lazily ---------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if self._given_transports is not None:
            msg = "a client built on explicit transports cannot be pickled; build it from a ClientConfig"
            raise ClientStateError(msg)
        return {
            "model": self.model,
            "version": self.version,
            "config": self.config,
            "model_config": self.model_config,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["model"], state["config"], version=state["version"], model_config=state.get("model_config")
        )

    # --- lifecycle ----------------------------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        return self._state

    async def _start_fallback(self, model: str) -> Transport | None:
        """A transport to the process's fallback server with ``model`` loaded, when this client needs one."""
        log.warning("no reachable server has model '%s': using the local fallback server", model)
        address = await self._fallback.ensure(model)
        return None if address is None else open_transport(address, self.config)

    async def _open(self) -> ServerRegistry:
        if self._state is ClientState.CLOSED:
            msg = f"client for model '{self.model}' is closed"
            raise ClientStateError(msg)
        if self._registry is not None:
            return self._registry
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._registry is None:
                transports = self._given_transports
                if transports is None:
                    addresses = [*self.config.servers, *await resolve_services(self.config.services)]
                    transports = [open_transport(a, self.config) for a in addresses]
                registry = ServerRegistry.for_client(transports, self.config, self._start_fallback)
                await registry.discover()
                self._in_flight = InFlight(self.config.max_in_flight)
                self._registry = registry
                self._state = ClientState.OPEN
        return self._registry

    async def close(self) -> None:
        """Unregister shared memory, close connections, stop the fallback server. Idempotent."""
        if self._state is ClientState.CLOSED:
            return
        self._state = ClientState.CLOSED
        try:
            if self._coalescer is not None:
                await self._coalescer.close()
            if self._registry is not None:
                await self._registry.close()
        finally:
            await self._fallback.release()

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # --- retries --------------------------------------------------------------------------------------

    def _with_retries(self, operation: Callable[[ServerEntry], Awaitable[T]]) -> Awaitable[tuple[T, int]]:
        """Run ``operation`` on a chosen server with retries (:mod:`sonic.client.retries`). Not a
        coroutine itself once open: each call's path is one frame shorter."""
        registry = self._registry
        if registry is None or self._state is not ClientState.OPEN:
            return self._open_then_retry(operation)
        return with_retries(self.model, self.config, registry, self.statistics, operation)

    async def _open_then_retry(self, operation: Callable[[ServerEntry], Awaitable[T]]) -> tuple[T, int]:
        registry = await self._open()  # connects, or raises once closed
        return await with_retries(self.model, self.config, registry, self.statistics, operation)

    # --- metadata -------------------------------------------------------------------------------------

    async def model_info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        fetched, _ = await self._with_retries(self._fetch_info)
        self._info = fetched
        return fetched

    async def _fetch_info(self, entry: ServerEntry) -> ModelInfo:
        info = await entry.transport.model_info(self.model, self.version)
        if self.model_config is not None:
            checksums = await entry.transport.model_checksums(self.model, self.version)
            checked = await asyncio.to_thread(
                checksum.verify, self.model, entry.address, checksums, self.model_config
            )
            log.info("model '%s': %d checksum(s) of %s match", self.model, checked, entry.address)
        return info

    # --- inference ------------------------------------------------------------------------------------

    async def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
        class_counts: Mapping[str, int] | None = None,
    ) -> Arrays:
        """Named numpy inputs in, named numpy outputs out (all outputs unless ``outputs`` names some).

        ``parameters``: Triton's request parameters (``sequence_id``, ``priority``, ``timeout``, ...) and
        custom ones a model reads (``request.parameters()`` in a Python model); see
        :mod:`sonic.protocol.types`. ``class_counts``: outputs asked as their top k classes (Triton's
        classification extension, tritonclient's ``class_count``): each comes back as a BYTES array of
        ``b"value:index[:label]"``, shape ``[batch, k]``.
        """
        if class_counts:
            return (
                await self.infer_detailed(inputs, outputs, parameters=parameters, class_counts=class_counts)
            ).outputs
        registry = self._registry
        info = self._info
        if parameters or registry is None or info is None or self._state is not ClientState.OPEN:
            return (await self.infer_detailed(inputs, outputs, parameters=parameters)).outputs
        try:
            key, arrays = signature(inputs, outputs)
        except Exception:  # noqa: BLE001  (the full path's checks say what is wrong, in their order)
            return (await self.infer_detailed(inputs, outputs)).outputs
        plan = self._plans.get(info, key, arrays, outputs)
        if plan is None or self.config.verbose:
            return (await self.infer_detailed(arrays, outputs)).outputs
        return await self._planned(registry, info, plan, arrays)

    def first_try(self, inputs: Mapping[str, Any], outputs: Sequence[str] | None) -> FirstTry | None:
        """A planned call's first try when it needs nothing of the loop: open, metadata known, every
        server HEALTHY (no probe due), a plan without shared memory, a free slot (taken: the caller
        gives it back). None: :meth:`infer` instead. A new signature's checks raise as in infer."""
        registry, info, slots = self._registry, self._info, self._in_flight
        if registry is None or info is None or slots is None or self._state is not ClientState.OPEN:
            return None
        if self.config.verbose or any(e.health is not Health.HEALTHY for e in registry.entries):
            return None
        try:
            key, arrays = signature(inputs, outputs)
        except Exception:  # noqa: BLE001  (infer's full path says what is wrong)
            return None
        plan = self._plans.get(info, key, arrays, outputs)
        entry = registry.first_choice(self.model)
        if plan is None or entry is None:
            return None
        if plan.shm_bytes >= self.config.shm_min_bytes and self._tries.use_shm(entry):
            return None
        if not slots.take():
            return None
        return FirstTry(entry, info, plan, arrays, f"{self.model}-{next(self._ids)}", slots)

    async def after_first_try(self, first: FirstTry, error: ServerError) -> Arrays:
        """The call whose :meth:`first_try` failed with ``error``: retries and failover go on from there."""
        registry = self._registry
        assert registry is not None
        return await self._planned(registry, first.info, first.plan, first.arrays, (first.entry, error))

    async def _planned(
        self,
        registry: ServerRegistry,
        info: ModelInfo,
        plan: CallPlan,
        arrays: Arrays,
        first_failure: tuple[ServerEntry, ServerError] | None = None,
    ) -> Arrays:
        """A call on its signature's plan: the request template, retries and failover as any call's;
        a local server's call large enough for shared memory goes through :class:`Tries` instead."""
        data = plan.tensor_data(arrays)
        request_id = f"{self.model}-{next(self._ids)}"
        tries = self._tries
        shm_possible = plan.shm_bytes >= self.config.shm_min_bytes

        def operation(entry: ServerEntry) -> Awaitable[WireResponse | Arrays]:
            if shm_possible and tries.use_shm(entry):
                return tries.call_planned(entry, info, plan, arrays, data, request_id)
            return entry.transport.infer_template(plan.template, request_id, data)

        slots = self._in_flight
        assert slots is not None
        if not slots.take():
            await slots.wait()
        try:
            answer, _ = await with_retries(
                self.model, self.config, registry, self.statistics, operation, first_failure
            )
        finally:
            slots.give()
        return answer if isinstance(answer, dict) else plan.decode(answer)

    async def infer_ragged(
        self,
        objects: Sequence[Mapping[str, Any]],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
    ) -> list[Arrays]:
        """One request per object (shapes may differ), sent concurrently, results in the given order."""
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self.infer(o, outputs, parameters=parameters)) for o in objects]
        return [t.result() for t in tasks]

    async def infer_detailed(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        *,
        parameters: Parameters | None = None,
        class_counts: Mapping[str, int] | None = None,
    ) -> InferResult:
        info = await self.model_info()
        arrays, batch = batching.check_inputs(info, inputs)
        names = batching.output_names(info, outputs)
        if parameters:
            batching.check_request_parameters(self.model, parameters)
        classes = batching.check_class_counts(self.model, names, class_counts or {})
        if batch == 0 and not classes:  # classified outputs are the server's to shape
            return InferResult(batching.empty_outputs(info, names), CallTiming())
        # Requests with parameters are never merged: each keeps its own.
        if (
            self.config.coalesce_in_flight
            and not parameters
            and not classes
            and 0 < batch < info.max_batch_size
        ):
            return await self._coalesced(info, arrays, batch, names)
        extra = parameters or {}
        parts = batching.split(arrays, batch, info.max_batch_size)
        if len(parts) == 1:
            results = [await self._infer_part(info, parts[0], names, extra, classes)]
        else:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._infer_part(info, p, names, extra, classes)) for p in parts]
            results = [t.result() for t in tasks]
        if len(results) == 1:
            return results[0]
        timing = sum((r.timing for r in results), CallTiming())
        return InferResult(batching.join([r.outputs for r in results]), timing)

    async def _coalesced(self, info: ModelInfo, arrays: Arrays, batch: int, names: list[str]) -> InferResult:
        if self._coalescer is None:

            async def send(merged: Arrays) -> tuple[Arrays, CallTiming]:
                result = await self._infer_part(info, merged, names, {})
                return result.outputs, result.timing

            self._coalescer = Coalescer(send, info.max_batch_size, self.config.coalesce_in_flight)
        key = (tuple(names), tuple((n, a.shape[1:], a.dtype.str) for n, a in arrays.items()))
        outputs, timing = await self._coalescer.submit(key, arrays, batch)
        return InferResult(outputs, timing)

    async def _infer_part(
        self,
        info: ModelInfo,
        arrays: Arrays,
        names: list[str],
        parameters: Parameters,
        class_counts: Mapping[str, int] | None = None,
    ) -> InferResult:
        start = time.perf_counter_ns()
        encoded = batching.encode(info, arrays)
        request_id = f"{self.model}-{next(self._ids)}"
        prepare_ns = time.perf_counter_ns() - start
        assert self._in_flight is not None
        async with self._in_flight:
            (outputs, serialize_s, wait_s, deserialize_s, server, address), tries = await self._with_retries(
                lambda entry: self._tries.call(
                    entry, info, encoded, names, request_id, parameters, class_counts
                )
            )
        timing = CallTiming(
            serialize_s + prepare_ns / 1e9, wait_s, deserialize_s, 1, tries, (address,), server
        )
        if server is not None:
            verbose_log.info("%s", verbose_summary(self.model, timing))
        return InferResult(outputs, timing)

    async def shm_request(
        self, shapes: Mapping[str, Sequence[int]], outputs: Sequence[str] | None = None
    ) -> ShmRequest:
        """A region of a server on this host, laid out for inputs of these shapes and the outputs.

        Fill ``request.inputs`` in place, ``await request.infer()`` for read-only output views, and
        ``release()`` it (or use ``async with``): see :mod:`sonic.client.zerocopy`.
        """
        info = await self.model_info()
        inputs, out = plan(info, shapes, outputs)
        registry = await self._open()

        if self.config.shared_memory is SharedMemoryMode.OFF:
            msg = f"model '{self.model}': shared memory is off in this client's config (shared_memory='off')"
            raise ClientStateError(msg)
        tensors = (inputs, out)
        return await borrow_region(
            self.model, self.version, self.config, registry, self._tries, tensors, self._send_pinned
        )

    async def _send_pinned(self, entry: ServerEntry, request: WireRequest) -> WireResponse:
        """One try on one server: a zero-copy request's data lives in a region that server registered."""
        registry = await self._open()  # ClientStateError once closed
        if not request.request_id:
            request.request_id = f"{self.model}-{next(self._ids)}"
        assert self._in_flight is not None
        async with self._in_flight:
            entry.outstanding += 1
            try:
                return await entry.transport.infer(request)
            except ConnectionLostError as exc:
                registry.mark_dead(entry, exc)
                raise
            finally:
                entry.outstanding -= 1
