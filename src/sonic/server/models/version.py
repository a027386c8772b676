"""A loaded model version: request validation against its config, scheduling, statistics."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import (
    InternalError,
    InvalidArgumentError,
    ModelConfigError,
    UnavailableError,
    UnimplementedError,
    clip,
    quote,
)
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.types import InferRequest, InferResponse, InputTensor, OutputTensor
from sonic.server.backends.base import Backend
from sonic.server.classification.top_k import Labels
from sonic.server.metrics.stats import ModelStats
from sonic.server.models.paths import ModelFiles
from sonic.server.runtime.executor import ModelInstance
from sonic.server.runtime.inline import InlinePolicy
from sonic.server.runtime.policy import BatchPolicy
from sonic.server.runtime.ragged import RaggedPlan
from sonic.server.runtime.scheduler import Scheduler
from sonic.server.runtime.sequence_scheduler import SequenceScheduler
from sonic.server.runtime.sequences import SequencePolicy
from sonic.server.shm.request import RequestMemory
from sonic.server.trace.requests import RequestTrace
from sonic.server.traffic.rows import TrafficRecorder, request_row
from sonic.server.work import RequestScheduler, WorkItem


def failure_reason(exc: BaseException) -> str:
    """Triton's ``reason`` label of ``nv_inference_request_failure``."""
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELED"
    if isinstance(exc, UnavailableError):  # queue full, queue timeout, draining
        return "REJECTED"
    if isinstance(exc, InternalError):
        return "BACKEND"
    return "OTHER"


def _dims(dims: Sequence[int]) -> str:
    """A shape as Triton writes it in messages: ``[-1,3]``."""
    return "[" + ",".join(map(str, dims)) + "]"


def _names(names: Iterable[str]) -> str:
    """Names as Triton lists them in messages: ``['A','B']``."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _first_mismatch(given: tuple[int, ...], expected: tuple[int, ...]) -> int:
    """Index of the first fixed dim of ``expected`` that ``given`` (as long) differs from; its length if none."""
    pairs = enumerate(zip(given, expected, strict=True))
    return next((i for i, (g, e) in pairs if e not in (-1, g)), len(given))


@dataclass(eq=False)
class ModelVersion:
    """One ready version of a model."""

    config: model_config_pb2.ModelConfig
    spec: ModelSpec
    version: int
    instances: list[ModelInstance]
    scheduler: RequestScheduler
    stats: ModelStats
    backend: type[Backend]
    ragged_inputs: frozenset[str] = frozenset()  # inputs whose shapes may differ within one batch
    # Decoupled requests' executions still running after their reader left (sonic.server.decoupled).
    background: set[asyncio.Task[None]] = field(default_factory=set)
    traffic: TrafficRecorder | None = None  # sonic serve --traffic-log: one record per request
    labels: Labels = field(default_factory=dict)  # output label files' lines, for classification

    @classmethod
    def create(
        cls,
        config: model_config_pb2.ModelConfig,
        spec: ModelSpec,
        version: int,
        instances: list[ModelInstance],
        backend: type[Backend],
        scheduler: RequestScheduler | None = None,
        files: ModelFiles | None = None,
        inline: InlinePolicy | None = None,
    ) -> ModelVersion:
        """With ``scheduler`` None (every backend but the ensemble) the batcher feeds ``instances``: the
        sequence batcher when the config has ``sequence_batching`` (``files``: the model's folder, holding
        its initial state files), else the dynamic batcher, whose batches may run on the event loop while
        they are tiny (``inline``; never a decoupled model's, whose executions send while they run)."""
        if config.model_transaction_policy.decoupled and not backend.supports_decoupled:
            raise ModelConfigError(
                f"model '{spec.name}': the {backend.name} backend cannot serve decoupled models "
                "(model_transaction_policy { decoupled: true }); only the python backend can"
            )
        stats = ModelStats()
        ragged = RaggedPlan.from_config(config)
        if scheduler is None and config.HasField("sequence_batching"):
            scheduler = SequenceScheduler(
                model_name=spec.name,
                policy=SequencePolicy.from_config(config, files or ModelFiles(spec.name, Path())),
                instances=instances,
                output_names=list(spec.outputs),
                stats=stats,
            )
        if scheduler is None:
            scheduler = Scheduler(
                model_name=spec.name,
                policy=BatchPolicy.from_config(config),
                instances=instances,
                output_names=list(spec.outputs),
                stats=stats,
                ragged=ragged,
                inline=None if config.model_transaction_policy.decoupled else inline,
            )
        ragged_inputs = ragged.ragged_inputs if ragged is not None else frozenset()
        return cls(config, spec, version, instances, scheduler, stats, backend, ragged_inputs)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def decoupled(self) -> bool:
        """Zero or more responses per request (``sonic.server.decoupled``), never through :meth:`infer`."""
        return bool(self.config.model_transaction_policy.decoupled)

    # --- validation -----------------------------------------------------------------------------------

    def _where(self, request: InferRequest, tensor: str) -> str:
        rid = f"[request id: {clip(request.request_id)}] " if request.request_id else ""
        return f"{rid}model '{self.name}' version {self.version} input {quote(tensor)}"

    def _unexpected_shape(
        self, where: str, name: str, dims: tuple[int, ...], shape: tuple[int, ...]
    ) -> InvalidArgumentError:
        expected = [-1, *dims] if self.spec.batched else list(dims)
        return InvalidArgumentError(
            f"{where}: unexpected shape for input {quote(name)} for model '{self.name}'. "
            f"Expected {_dims(expected)}, got {_dims(shape)}"
        )

    def _decode_input(
        self, request: InferRequest, tensor: InputTensor, raw: bytes | memoryview | None
    ) -> npt.NDArray[Any]:
        """``raw``: the tensor's bytes, as received or read from shared memory (None: typed contents)."""
        # Built only for an error: this runs for every input of every request. A partial, not a nested
        # function: compiled (mypyc), a nested function holds all of this function's locals, ``raw`` and
        # the array over the request's buffer included, in a reference cycle that only the cyclic garbage
        # collector frees, so every large request's memory outlived it (15.6 MB requests: 4x the CPU,
        # most of it the kernel zeroing fresh pages; docs/benchmarks.md "compiling the data plane").
        where = functools.partial(self._where, request, tensor.name)
        spec = self.spec.inputs.get(tensor.name)
        if spec is None:
            raise InvalidArgumentError(
                f"{where()}: unexpected inference input {quote(tensor.name)} for model '{self.name}', "
                f"expected one of {sorted(self.spec.inputs)}"
            )
        if tensor.datatype != spec.datatype.name:
            raise InvalidArgumentError(
                f"{where()}: inference input {quote(tensor.name)} data-type is {quote(tensor.datatype)}, but model "
                f"'{self.name}' expects '{spec.datatype.name}'"
            )
        shape = tensor.shape
        if len(shape) != len(spec.dims) + self.spec.batched:
            raise self._unexpected_shape(where(), tensor.name, spec.dims, shape)
        if self.spec.batched:
            if shape[0] > self.spec.max_batch_size:  # Triton's words
                raise InvalidArgumentError(
                    f"{where()}: inference request batch-size must be <= {self.spec.max_batch_size} "
                    f"for '{self.name}'"
                )
            if shape[0] < 1:
                raise InvalidArgumentError(
                    f"{where()}: inference request batch-size must be in 1..{self.spec.max_batch_size} "
                    f"for '{self.name}', got {shape[0]}"
                )
            sample = shape[1:]
        else:
            sample = shape
        if sample != spec.dims or -1 in sample:  # equal fixed dims, the common case, need no more
            mismatch = _first_mismatch(sample, spec.dims)
            if -1 in sample[: mismatch + 1]:  # Triton's words, for a -1 it meets before a mismatch
                raise InvalidArgumentError(
                    f"{where()}: All input dimensions should be specified for input {quote(tensor.name)} "
                    f"for model '{self.name}', got {_dims(shape)}"
                )
            if mismatch < len(sample):
                raise self._unexpected_shape(where(), tensor.name, spec.dims, shape)
            if min(sample) < 0:  # below -1, where the model's dim is variable
                raise InvalidArgumentError(f"{where()}: shape {list(shape)} has a negative dimension")
        if raw is not None:
            size = dtypes.element_count(shape) * spec.datatype.numpy.itemsize
            if spec.datatype.name != "BYTES" and len(raw) != size:  # Triton's words
                raise InvalidArgumentError(
                    f"{where()}: input byte size mismatch for input {quote(tensor.name)} for model "
                    f"'{self.name}'. Expected {size}, got {len(raw)}"
                )
            array = dtypes.array_from_bytes(raw, spec.datatype, shape, where)
        elif tensor.array is not None:
            array = tensor.array
            if tuple(array.shape) != shape:
                raise InvalidArgumentError(
                    f"{where()}: data has shape {list(array.shape)}, declared {list(shape)}"
                )
        else:
            raise InvalidArgumentError(f"{where()}: input has no data")
        if spec.model_dims != spec.dims:
            lead = shape[:1] if self.spec.batched else ()
            target = lead + spec.model_dims
            try:
                array = array.reshape(target)
            except ValueError:
                raise InvalidArgumentError(
                    f"{where()}: shape {list(shape)} cannot be reshaped to the model's {list(target)}"
                ) from None
        return array

    def prepare(self, request: InferRequest, memory: RequestMemory | None = None) -> WorkItem:
        """Validate and decode a request into a work item (raises InvalidArgumentError).

        ``memory``: the request's shared memory as the data plane resolved it: inputs in shared memory
        decode from the bytes read there, and the work item gets the buffers its outputs may run into.
        """
        arrays: dict[str, npt.NDArray[Any]] = {}
        for index, tensor in enumerate(request.inputs):
            if tensor.name in arrays:
                raise InvalidArgumentError(
                    f"{self._where(request, tensor.name)}: input {quote(tensor.name)} already exists in request"
                )
            raw = tensor.raw if tensor.shm is None or memory is None else memory.inputs[index]
            arrays[tensor.name] = self.backend.convert_input(
                self.name, tensor.name, self._decode_input(request, tensor, raw)
            )
        missing = [n for n, s in self.spec.inputs.items() if n not in arrays and not s.optional]
        if missing:
            total = len(self.spec.inputs)
            required = sum(not s.optional for s in self.spec.inputs.values())
            expected = (
                f"{total} inputs" if required == total else f"number of inputs between {required} and {total}"
            )
            raise InvalidArgumentError(  # Triton's words; the inputs it got in request order
                f"{self._where(request, missing[0])}: expected {expected} but got "
                f"{len(arrays)} inputs for model '{self.name}'. Got input(s) {_names(arrays)}, but missing "
                f"required input(s) {_names(missing)}. Please provide all required input(s)."
            )
        if request.outputs is not None:
            for name in request.outputs:
                if name not in self.spec.outputs:
                    raise InvalidArgumentError(  # Triton's words, then what the model has
                        f"unexpected inference output {quote(name)} for model '{self.name}'; it has "
                        f"{_names(self.spec.outputs)}"
                    )
        if self.spec.batched:
            batch_sizes = {name: a.shape[0] for name, a in arrays.items()}
            if len(set(batch_sizes.values())) > 1:
                first = next(iter(batch_sizes.values()))
                odd = next(name for name, size in batch_sizes.items() if size != first)
                raise InvalidArgumentError(  # Triton's words for the first that differs, then the sizes
                    f"{self._where(request, odd)}: input {quote(odd)} batch size does not match other inputs "
                    f"for '{self.name}'; batch sizes {batch_sizes}"
                )
            batch_size = next(iter(batch_sizes.values()))
            shape_key = tuple(
                (name, arrays[name].shape[1:]) for name in sorted(arrays) if name not in self.ragged_inputs
            )
        else:
            batch_size = 1
            shape_key = ()
        return WorkItem(
            inputs=arrays,
            batch_size=batch_size,
            shape_key=shape_key,
            future=asyncio.get_running_loop().create_future(),
            priority=request.priority,
            timeout_us=request.timeout_us,
            request_id=request.request_id,
            output_names=tuple(request.outputs) if request.outputs is not None else None,
            output_buffers=memory.buffers if memory is not None else None,
            parameters=request.parameters,
        )

    # --- inference ------------------------------------------------------------------------------------

    def output_tensor(self, name: str, array: npt.NDArray[Any]) -> OutputTensor:
        """Output ``name`` as the client sees it: a ``reshape``d output in its configured dims, as Triton."""
        spec = self.spec.outputs[name]
        shape = spec.client_shape(tuple(array.shape), self.spec.batched)
        if shape != array.shape:
            try:
                array = array.reshape(shape)
            except ValueError:
                raise InternalError(
                    f"model '{self.name}': output '{name}' of shape {list(array.shape)} does not fit its "
                    f"configured dims {list(spec.dims)} (reshape {list(spec.model_dims)})"
                ) from None
        return OutputTensor(name, spec.datatype.name, tuple(array.shape), array)

    async def infer(
        self,
        request: InferRequest,
        received_ns: int = 0,
        memory: RequestMemory | None = None,
        trace: RequestTrace | None = None,
    ) -> InferResponse:
        """``received_ns``: when the request arrived (0: now, a model-to-model call); ``memory``: its
        shared memory (:meth:`prepare`); ``trace``: its trace record, when Triton's trace extension samples it."""
        if self.decoupled:
            # Only model-to-model calls get here (the front ends refuse in their own words): Triton's
            # words for a BLS call without decoupled=True.
            raise UnimplementedError(
                f"Model {self.name} - Error when running inference: Model {self.name} is using the decoupled. "
                "The current BLS request call doesn't support models using the decoupled transaction policy. "
                "Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
            )
        received = received_ns or time.perf_counter_ns()
        # A request refused by validation never reaches the model: Triton counts it in no statistic.
        item = self.prepare(request, memory)
        traffic = self.traffic if self.traffic is not None and self.traffic.enabled else None
        if trace is not None:  # the inputs as queued (the scheduler lets go of them once they ran)
            trace.queued(item.inputs, {name: spec.datatype.name for name, spec in self.spec.inputs.items()})
            item.trace = trace
        self.stats.pending_requests += 1
        try:
            outputs, timing = await self.scheduler.submit(item)
        except BaseException as exc:
            elapsed = time.perf_counter_ns() - received
            self.stats.record_failure(elapsed, failure_reason(exc))
            if traffic is not None:
                keep = traffic.wants_contents()
                traffic.record(
                    request_row(
                        request,
                        self.version,
                        item.batch_size,
                        None,
                        elapsed,
                        error=exc,
                        keep_contents=keep,
                        signatures=traffic.signatures,
                    )
                )
            raise
        finally:
            self.stats.pending_requests -= 1
        # In config order whatever order the request asked in, as Triton answers.
        names = [n for n in self.spec.outputs if request.outputs is None or n in request.outputs]
        tensors = [self.output_tensor(name, outputs[name]) for name in names]
        elapsed = time.perf_counter_ns() - received
        self.stats.record_success(elapsed, timing, item.batch_size)
        if trace is not None:
            trace.executed(item.enqueued_ns, timing, tensors)
        if traffic is not None:
            keep = traffic.wants_contents()
            arrays = [tensor.array for tensor in tensors]
            traffic.record(
                request_row(
                    request,
                    self.version,
                    item.batch_size,
                    timing,
                    elapsed,
                    arrays,
                    keep_contents=keep,
                    signatures=traffic.signatures,
                )
            )
        return InferResponse(self.name, str(self.version), request.request_id, tensors)
