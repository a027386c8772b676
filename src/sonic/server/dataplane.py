"""The transport-neutral data plane: every KServe v2 operation, once, for the gRPC and HTTP adapters.

Control-plane answers are the protobuf messages of Triton's gRPC service (the HTTP adapter renders
them as JSON); inference uses the lighter :mod:`sonic.protocol.types` dataclasses. Inference on a
decoupled model (gRPC only) is :func:`sonic.server.frontends.grpc_methods.infer_decoupled`, an async
generator: this module is compiled with mypyc (:mod:`sonic.compiled`), which compiles none.
"""

from __future__ import annotations

from collections.abc import Callable
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
from sonic.server.cache import infer_through_cache
from sonic.server.classification.top_k import classify_off_loop
from sonic.server.config import ModelControlMode, ServerConfig
from sonic.server.header_forward import Forwarded, forward
from sonic.server.log_settings import LogSettingsService
from sonic.server.models.load_config import parse_override
from sonic.server.models.manager import ModelManager
from sonic.server.models.version import ModelVersion
from sonic.server.observe import RequestObserver
from sonic.server.shm.regions import SharedMemoryRegistry
from sonic.server.shm.request import names_shared_memory, resolve
from sonic.server.trace.config import TraceConfig
from sonic.server.trace.requests import RequestTrace, TraceManager
from sonic.server.trace.settings import Answer, Changes

EXTENSIONS = (
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "statistics",
    "parameters",
    "system_shared_memory",
    "binary_tensor_data",
    "logging",
    "trace",
)


@dataclass(slots=True)
class Arrival:
    """What a front end knows of an inference request beyond its wire form: when it arrived
    (``perf_counter_ns``, the start of its latency), its W3C trace headers (read only when tracing) and,
    when Triton's trace extension samples it, its trace record. Never changed once made (a trace is added
    to a copy, ``dataclasses.replace``); not frozen, as a frozen class's __init__ sets every field through
    ``object.__setattr__`` (1.4 µs per request), and written out, as sonic.protocol.types.InputTensor says."""

    received_ns: int
    trace_headers: dict[str, str] | None = None
    trace: RequestTrace | None = None
    # Headers the front end's --*-header-forward-pattern matched: added to the request's parameters.
    forwarded: Forwarded = ()

    def __init__(
        self,
        received_ns: int,
        trace_headers: dict[str, str] | None = None,
        trace: RequestTrace | None = None,
        forwarded: Forwarded = (),
    ) -> None:
        self.received_ns = received_ns
        self.trace_headers = trace_headers
        self.trace = trace
        self.forwarded = forwarded


class DataPlane:
    def __init__(self, config: ServerConfig, models: ModelManager) -> None:
        self._config = config
        self.models = models
        self.shared_memory = SharedMemoryRegistry(
            allow_other_users=config.security.allow_shm_from_other_users,
            copy_always=config.security.shm_copy_always,
        )
        self.accepting = False  # false before start-up is done and once shutdown began
        self.cache = models.cache  # the manager's: model-to-model calls use it too
        self.observer: RequestObserver | None = None  # request logs / tracing, when configured
        self.in_flight = 0  # inference requests being served: those left at the drain timeout are cut off
        # The log-settings API; the server replaces it with its own (its log handler, its traffic recorder).
        self.log_settings = LogSettingsService(LogControl.in_process())
        # Triton's trace extension; the server replaces it with one of its configuration's.
        self.traces = TraceManager(TraceConfig())

    @property
    def wants_trace_context(self) -> bool:
        """Whether frontends should pass W3C trace headers along (only when spans are made)."""
        return (self.observer is not None and self.observer.tracing) or self.traces.wants_trace_context

    # --- health and metadata ------------------------------------------------------------------------

    def server_live(self) -> bool:
        return True

    def server_ready(self) -> bool:
        """Started and not stopping; with strict readiness (Triton's default) also every model ready."""
        if not self.accepting:
            return False
        return not self._config.strict_readiness or not self.models.unready_models()

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
        # As Triton: NOT_FOUND / UNAVAILABLE, in the words of a lookup, unless a version serves.
        self.models.get(name, version)
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
                if version:  # then which version
                    raise InvalidArgumentError(
                        f"requested model version is not available for model {quote(model_name)} "
                        f"(version {quote(version)})"
                    )
                raise InvalidArgumentError(f"requested model {quote(model_name)} is not available")
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
        if not self._config.security.repository_control:
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
            if (
                key == "config"
            ):  # replaces the whole configuration, as in Triton (server/models/load_config.py)
                override = parse_override(name, value)
            elif key.startswith("file:"):
                raise InvalidArgumentError(
                    f"load of {quote(name)}: model file overrides ({quote(key)}) are not supported; put files in the "
                    "repository"
                )
            else:
                raise InvalidArgumentError(
                    f"load of {quote(name)}: unrecognized load parameter {quote(key)}."
                )
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
            if not isinstance(value, bool):  # Triton's words (gRPC), then what came
                raise InvalidArgumentError(
                    f"unload of {quote(name)}: invalid value type for 'unload_dependents' parameter, expected "
                    f"bool_param. Got {value!r}"
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
        if arrival.forwarded:
            forward(request.parameters, arrival.forwarded)
        self.in_flight += 1
        try:
            if arrival.trace is not None:
                return await self._traced(request, arrival, endpoint, arrival.trace)
            if self.observer is not None:
                return await self.observer(
                    lambda r: self._infer(r, arrival.received_ns, endpoint), request, arrival.trace_headers
                )
            return await self._infer(request, arrival.received_ns, endpoint)
        finally:
            self.in_flight -= 1

    async def _traced(
        self, request: InferRequest, arrival: Arrival, endpoint: str, trace: RequestTrace
    ) -> InferResponse:
        """:meth:`infer` of a request Triton's trace extension samples: its model's line and activities."""
        model = self.models.get(request.model_name, request.model_version)  # errors as the inference's
        trace.started(model.name, model.version, request.request_id)
        try:
            if self.observer is not None:
                response = await self.observer(
                    lambda r: self._infer(r, arrival.received_ns, endpoint, trace),
                    request,
                    arrival.trace_headers,
                )
            else:
                response = await self._infer(request, arrival.received_ns, endpoint, trace)
            trace.stamp("INFER_RESPONSE_COMPLETE")
            return response
        finally:
            trace.stamp("REQUEST_END")

    def trace_setting(self, model: str, changes: Callable[[], Changes] | None) -> Answer:
        """Triton's trace settings of ``model`` ("" : the global ones), after ``changes`` when given (read
        only once the model is known, as Triton checks it first)."""
        if model and not self.model_ready(model):
            raise InvalidArgumentError(f"Request for unknown model : {model}")
        if changes is not None:
            return self.traces.update(model, changes())
        return self.traces.answer(model)

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

    async def _infer(
        self, request: InferRequest, received_ns: int, endpoint: str, trace: RequestTrace | None = None
    ) -> InferResponse:
        model = self._unary_model(request.model_name, request.model_version, endpoint)
        cached = self.cache is not None and model.config.response_cache.enable
        memory = (
            await resolve(self.shared_memory, request, model.spec, cached)
            if names_shared_memory(request)
            else None
        )
        try:
            if self.cache is not None and cached:
                response = await infer_through_cache(self.cache, model, request, received_ns, memory, trace)
            else:
                response = await model.infer(request, received_ns, memory, trace)
            if memory is not None:
                await memory.write(self.shared_memory, response)
        finally:
            if memory is not None:  # answered, refused, failed or cancelled: the regions may go again
                memory.release()
        if request.output_classes:  # never with shared memory: the codecs refuse both on one output
            response = await classify_off_loop(
                response, request.output_classes, model.spec.batched, model.labels
            )
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
