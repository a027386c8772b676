"""The transport-neutral data plane: every KServe v2 operation, once, for the gRPC and HTTP adapters.

Control-plane answers are the protobuf messages of Triton's gRPC service (the HTTP adapter renders
them as JSON); inference uses the lighter :mod:`sonic.protocol.types` dataclasses.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from tritonclient.grpc import service_pb2

import sonic
from sonic.logs import LogControl
from sonic.protocol.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    UnimplementedError,
    quote,
)
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.types import InferRequest, InferResponse
from sonic.server.cache import ResponseCache, infer_through_cache
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.decoupled import DecoupledCall, StreamAnswer
from sonic.server.load_config import parse_override
from sonic.server.log_settings import LogSettingsService
from sonic.server.manager import ModelManager
from sonic.server.model import ModelVersion
from sonic.server.observe import RequestObserver
from sonic.server.shm import SharedMemoryRegistry
from sonic.server.shm_request import resolve

EXTENSIONS = (
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "statistics",
    "parameters",
    "system_shared_memory",
    "binary_tensor_data",
    "logging",
)


@dataclass(frozen=True, slots=True)
class Arrival:
    """What a front end knows of an inference request beyond its wire form: when it arrived
    (``perf_counter_ns``, the start of its latency) and its W3C trace headers (read only when tracing)."""

    received_ns: int
    trace_headers: dict[str, str] | None = None


class DataPlane:
    def __init__(self, config: ServerConfig, models: ModelManager) -> None:
        self._config = config
        self.models = models
        self.shared_memory = SharedMemoryRegistry(
            allow_other_users=config.allow_shm_from_other_users, copy_always=config.shm_copy_always
        )
        self.accepting = False  # false before start-up is done and once shutdown began
        # One server-wide cache, used by models whose config says response_cache { enable: true }.
        self.cache = ResponseCache(config.cache_size_bytes) if config.cache_size_bytes > 0 else None
        self.observer: RequestObserver | None = None  # request logs / tracing, when configured
        self.in_flight = 0  # inference requests being served: those left at the drain timeout are cut off
        # The log-settings API; the server replaces it with its own (its log handler, its traffic recorder).
        self.log_settings = LogSettingsService(LogControl.in_process())

    @property
    def wants_trace_context(self) -> bool:
        """Whether frontends should pass W3C trace headers along (only when spans are made)."""
        return self.observer is not None and self.observer.tracing

    # --- health and metadata ------------------------------------------------------------------------

    def server_live(self) -> bool:
        return True

    def server_ready(self) -> bool:
        return self.accepting

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.models.get(name, version)
        except (NotFoundError, UnavailableError):
            return False
        return True

    def server_metadata(self) -> service_pb2.ServerMetadataResponse:
        return service_pb2.ServerMetadataResponse(
            name=self._config.server_name, version=sonic.__version__, extensions=list(EXTENSIONS)
        )

    def model_metadata(self, name: str, version: str = "") -> service_pb2.ModelMetadataResponse:
        model = self.models.get(name, version)
        response = service_pb2.ModelMetadataResponse(
            name=name,
            versions=[str(m.version) for m in self.models.ready_versions(name)],
            platform=model.config.platform or model.config.backend,
        )
        lead = [-1] if model.spec.batched else []
        for spec in model.spec.inputs.values():
            response.inputs.add(name=spec.name, datatype=spec.datatype.name, shape=lead + list(spec.dims))
        for spec in model.spec.outputs.values():
            response.outputs.add(name=spec.name, datatype=spec.datatype.name, shape=lead + list(spec.dims))
        return response

    def model_config(self, name: str, version: str = "") -> service_pb2.ModelConfigResponse:
        if version:
            self.models.get(name, version)  # NOT_FOUND / UNAVAILABLE for a bad version
        response = service_pb2.ModelConfigResponse()
        response.config.CopyFrom(self.models.config_of(name))
        return response

    def model_statistics(self, name: str = "", version: str = "") -> service_pb2.ModelStatisticsResponse:
        response = service_pb2.ModelStatisticsResponse()
        names = [name] if name else self.models.loaded_models()
        for model_name in names:
            try:
                versions = [self.models.get(model_name, version)] if version else []
            except (NotFoundError, UnavailableError):
                versions = []
            versions = versions or ([] if version else self.models.ready_versions(model_name))
            if name and not versions:  # Triton's status and words for a model it does not serve
                where = f"{quote(model_name)} version {quote(version)}" if version else quote(model_name)
                raise InvalidArgumentError(f"requested model {where} is not available")
            for model in versions:
                response.model_stats.append(model.stats.to_proto(model.name, model.version))
        return response

    # --- repository -----------------------------------------------------------------------------------

    def repository_index(self, ready_only: bool) -> service_pb2.RepositoryIndexResponse:
        response = service_pb2.RepositoryIndexResponse()
        for row in self.models.index(ready_only):
            response.models.add(name=row.name, version=row.version, state=row.state.value, reason=row.reason)
        return response

    def _check_explicit(self, action: str) -> None:
        if not self._config.repository_control:
            raise PermissionDeniedError(
                f"model {action} is disabled on this server (started with --disable-repository-control)"
            )
        if self._config.model_control_mode is not ModelControlMode.EXPLICIT:
            # UNAVAILABLE, in Triton's words (which name only the poll mode, also in mode none), then ours.
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled; this server runs in "
                f"model control mode '{self._config.model_control_mode}' (start it with "
                f"--model-control-mode explicit to {action} models)"
            )

    async def load_model(self, name: str, parameters: dict[str, object]) -> None:
        self._check_explicit("load")
        override = None
        for key, value in parameters.items():
            if key == "config":  # replaces the whole configuration, as in Triton (server/load_config.py)
                override = parse_override(name, value)
            elif key.startswith("file:"):
                raise InvalidArgumentError(
                    f"load of {quote(name)}: model file overrides ({quote(key)}) are not supported; put files in the "
                    "repository"
                )
            else:
                raise InvalidArgumentError(f"load of {quote(name)}: unknown parameter {quote(key)}")
        await self.models.load(name, override)

    async def unload_model(self, name: str, parameters: dict[str, object] | None = None) -> None:
        """``unload_dependents`` true: an ensemble's step models too, unless another ensemble calls them."""
        self._check_explicit("unload")
        dependents = False
        for key, value in (parameters or {}).items():
            if key != "unload_dependents":
                raise InvalidArgumentError(
                    f"unload of {quote(name)}: unknown parameter {quote(key)} (known: 'unload_dependents')"
                )
            if not isinstance(value, bool):
                raise InvalidArgumentError(
                    f"unload of {quote(name)}: parameter 'unload_dependents' must be a boolean, got {value!r}"
                )
            dependents = value
        await self.models.unload(name, unload_dependents=dependents)

    # --- inference ------------------------------------------------------------------------------------

    async def infer(
        self, request: InferRequest, arrival: Arrival, endpoint: str = "ModelInfer RPC"
    ) -> InferResponse:
        """One request, one response. ``endpoint`` names the caller in the refusal of a decoupled model."""
        if not self.accepting:
            msg = "server is not accepting requests (starting up or shutting down)"
            raise UnavailableError(msg)
        self.in_flight += 1
        try:
            if self.observer is not None:
                return await self.observer(
                    lambda r: self._infer(r, arrival.received_ns, endpoint), request, arrival.trace_headers
                )
            return await self._infer(request, arrival.received_ns, endpoint)
        finally:
            self.in_flight -= 1

    def raw_request_target(self, name: str, version: str, endpoint: str) -> tuple[ModelSpec, int]:
        """The spec and version number a raw binary HTTP request deduces its input from (errors as inference's)."""
        model = self._unary_model(name, version, endpoint)
        return model.spec, model.version

    def _unary_model(self, name: str, version: str, endpoint: str) -> ModelVersion:
        """The model a unary inference goes to: NOT_FOUND/UNAVAILABLE as any lookup, a decoupled one refused."""
        model = self.models.get(name, version)
        if model.decoupled:  # Triton's words and status
            raise UnimplementedError(f"{endpoint} doesn't support models with decoupled transaction policy")
        return model

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether the model answers with a stream of responses (NOT_FOUND/UNAVAILABLE as for inference)."""
        return self.models.get(name, version).decoupled

    async def infer_decoupled(
        self, request: InferRequest, arrival: Arrival
    ) -> AsyncGenerator[StreamAnswer, None]:
        """A decoupled model's responses to one request, as it sends them; the last one is final.

        Inputs may be in shared memory; outputs may not (each response has its own).
        """
        if not self.accepting:
            msg = "server is not accepting requests (starting up or shutting down)"
            raise UnavailableError(msg)
        model = self.models.get(request.model_name, request.model_version)
        if request.output_shm:
            raise InvalidArgumentError(
                f"model {quote(request.model_name)} is decoupled: its outputs cannot go to shared memory "
                "(each of its responses would overwrite the region)"
            )
        memory = await resolve(self.shared_memory, request, model.spec, cached=False)
        call = DecoupledCall.start(model, request, received_ns=arrival.received_ns, memory=memory)
        self.in_flight += 1
        try:
            while True:
                for answer in await call.next():
                    yield answer
                    if answer.final:
                        return
        finally:
            self.in_flight -= 1
            call.close()

    async def _infer(self, request: InferRequest, received_ns: int, endpoint: str) -> InferResponse:
        model = self._unary_model(request.model_name, request.model_version, endpoint)
        cached = self.cache is not None and model.config.response_cache.enable
        memory = await resolve(self.shared_memory, request, model.spec, cached)
        if self.cache is not None and cached:
            response = await infer_through_cache(self.cache, model, request, received_ns, memory)
        else:
            response = await model.infer(request, received_ns, memory)
        if memory is not None:
            await memory.write(self.shared_memory, response)
        return response

    # --- system shared memory ---------------------------------------------------------------------------

    def system_shared_memory_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    def system_shared_memory_unregister(self, name: str) -> None:
        self.shared_memory.unregister(name)

    def system_shared_memory_status(self, name: str) -> service_pb2.SystemSharedMemoryStatusResponse:
        response = service_pb2.SystemSharedMemoryStatusResponse()
        for region in self.shared_memory.status(name):
            status = response.regions[region.name]
            status.name, status.key = region.name, region.key
            status.offset, status.byte_size = region.offset, region.byte_size
        return response

    # --- CUDA shared memory: never registered here, so status lists none and unregister has nothing to do.
    # Triton answers both without a GPU too, and clients (perf_analyzer) unregister "all" when they finish.

    def cuda_shared_memory_status(self, name: str) -> service_pb2.CudaSharedMemoryStatusResponse:
        if name:
            raise NotFoundError(f"Unable to find cuda shared memory region: {quote(name)}")
        return service_pb2.CudaSharedMemoryStatusResponse()

    def cuda_shared_memory_unregister(self, name: str) -> None:
        """Nothing to forget: CUDA regions cannot be registered (unknown names are not an error)."""

    def cuda_shared_memory_register(self, name: str) -> None:
        raise UnimplementedError(
            f"CUDA shared memory region {quote(name)}: not supported by this server; use system shared memory"
        )
