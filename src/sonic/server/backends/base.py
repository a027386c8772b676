"""The backend interface: one class per framework, one object per model instance.

A backend object is created in a worker thread for each instance of each loaded model version and
then only ever called from that instance's own thread (or, when it says :attr:`Backend.runs_on_any_thread`,
from the event loop's, never at the same time), so implementations need no locking.

Three shapes of backend:

- :class:`Backend`: takes one (possibly merged) batch as arrays; the dynamic batcher concatenates
  requests before and splits results after (ONNX Runtime, PyTorch, trees). A backend that needs the
  requests behind a merged batch (ids, parameters, each one's rows) overrides
  :meth:`Backend.execute_batch`, which gets them in a :class:`Batch`.
- :class:`RequestBackend`: takes the batch's requests as a list and answers each one separately,
  as Triton's Python backend does; a failure can then fail one request and not the others.
- A backend whose :meth:`Backend.create_scheduler` returns a scheduler has no instances at all: it
  schedules requests itself on the event loop (the ensemble, which only calls other models).

Files: a backend opens ``InstanceContext.model_path`` (already checked) and any other file its
configuration names only through ``InstanceContext.files`` / ``version_file`` / ``op_libraries``, the
choke point of :mod:`sonic.server.models.paths` that keeps them inside the model's folder.

Backends that call other loaded models (ensembles, Python models doing BLS) get a
:class:`ModelCaller` in their :class:`InstanceContext`, and describe each call as a :class:`ModelCall`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import ModelConfigError, quote
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.types import InferRequest, InputTensor, check_parameters
from sonic.server.metrics.custom import CustomMetrics
from sonic.server.models.paths import ModelFiles
from sonic.server.responses import ResponseChannel, Streamed
from sonic.server.trace.requests import RequestTrace
from sonic.server.work import RequestScheduler


@dataclass(frozen=True)
class ModelCall:
    """One call of another loaded model of the same server: arrays in, nothing serialized.

    ``model_version`` "" is the model's version policy's choice; ``output_names`` None asks for every
    output of the model; ``parameters`` are request parameters as a client sends them (sequence id and
    flags, priority, timeout, custom ones): an ensemble step gets its ensemble request's, a BLS call
    those its ``pb_utils.InferenceRequest`` was built with.
    """

    model_name: str
    model_version: str
    inputs: Mapping[str, npt.NDArray[Any]]
    output_names: Sequence[str] | None = None
    request_id: str = ""
    parameters: Mapping[str, object] | None = None
    trace: RequestTrace | None = None  # Triton's trace of the call, when its caller's is sampled

    def request(self) -> InferRequest:
        """The request the called model validates and schedules as any other (parameters checked first)."""
        if self.parameters:
            check_parameters(self.parameters, f"call of model '{self.model_name}'")
        tensors = []
        for name, array in self.inputs.items():
            # BYTES tensors are object arrays inside the server, whatever numpy string type came in.
            value = array.astype(np.object_) if array.dtype.kind in "SU" else array
            datatype = dtypes.from_numpy(value.dtype)
            tensors.append(InputTensor(name, datatype.name, tuple(value.shape), array=value))
        return InferRequest(
            model_name=self.model_name,
            model_version=self.model_version,
            inputs=tensors,
            request_id=self.request_id,
            outputs=list(self.output_names) if self.output_names is not None else None,
            parameters=dict(self.parameters) if self.parameters else {},
        )


class ModelCaller(Protocol):
    """Calls another loaded model of the same server (:class:`ModelCall`: which, with what)."""

    async def infer(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        """From the event loop: the model's outputs by name."""
        ...

    def infer_blocking(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        """From an instance thread (never the event loop's): waits for :meth:`infer`."""
        ...

    def infer_stream_blocking(self, call: ModelCall) -> Iterator[Streamed]:
        """From an instance thread: each response of the model (a decoupled one's several), the last final."""
        ...


@dataclass(frozen=True)
class InstanceContext:
    """Everything a backend instance is given at creation."""

    config: model_config_pb2.ModelConfig
    spec: ModelSpec
    version: int
    version_dir: Path
    model_path: Path  # version_dir / default_model_filename (may not exist for some backends)
    instance_name: str
    device_kind: str  # "cpu" or "gpu"
    device_id: int
    # --backend-config settings: the global ones (KEY=VALUE), then the backend's own (NAME,KEY=VALUE), which win
    options: Mapping[str, str] = field(default_factory=dict)
    models: ModelCaller | None = None  # the server's other models; None where there is no server
    custom_metrics: CustomMetrics | None = None  # the server's registry of model-defined metrics
    allow_links_outside: bool = False  # --allow-model-links-outside: see sonic.server.models.paths

    @property
    def files(self) -> ModelFiles:
        """The choke point for every file this model's configuration names (:mod:`sonic.server.models.paths`)."""
        return ModelFiles(self.config.name, self.version_dir.parent, self.allow_links_outside)

    def version_file(self, field: str, name: str) -> Path:
        """``name`` in this version's folder, through the choke point (InvalidArgumentError if outside)."""
        return self.files.version_file(self.version, field, name)

    def op_libraries(self) -> list[Path]:
        """``model_operations { op_library_filename }``: custom-operator libraries to load first.

        Names relative to the model's folder, kept inside it by the choke point (a library installed
        elsewhere is linked into the folder, with --allow-model-links-outside); ModelConfigError if missing.
        """
        libraries = []
        for name in self.config.model_operations.op_library_filename:
            path = self.files.path("model_operations.op_library_filename", name)
            if not path.is_file():
                raise ModelConfigError(
                    f"model '{self.config.name}': op_library_filename {quote(name)} does not exist in the "
                    "model's folder"
                )
            libraries.append(path)
        return libraries

    def parameter(self, key: str) -> str | None:
        """A config ``parameters { key: ... string_value: ... }`` entry, else a backend option."""
        if key in self.config.parameters:
            return str(self.config.parameters[key].string_value)
        return self.options.get(key)


class Backend(ABC):
    """One model instance. Subclasses set ``name`` and ``default_filename``."""

    name: ClassVar[str]
    default_filename: ClassVar[str]
    # Whether the backend can serve decoupled models (it sends through ``Request.responses``).
    supports_decoupled: ClassVar[bool] = False

    @classmethod
    def model_filename(cls, config: model_config_pb2.ModelConfig, version_dir: Path) -> str:
        """The name of the file (or folder) in ``version_dir`` this model loads, before completion.

        The server passes it through :mod:`sonic.server.models.paths` before :meth:`auto_complete_config`
        reads it. The default: the config's ``default_model_filename``, else ``default_filename``.
        """
        del version_dir
        return config.default_model_filename or cls.default_filename

    @classmethod  # noqa: B027  (optional hook with a do-nothing default)
    def auto_complete_config(cls, config: model_config_pb2.ModelConfig, model_path: Path) -> None:
        """Fill inputs, outputs and ``max_batch_size`` from the model file where it carries them.

        The default does nothing: the config must then be complete.
        """

    @classmethod
    def complete_config(
        cls, config: model_config_pb2.ModelConfig, model_path: Path, options: Mapping[str, str]
    ) -> None:
        """What the server runs to auto-complete a configuration: :meth:`auto_complete_config`.

        ``options`` are the backend's ``--backend-config`` settings (the global ones, then its own); a
        backend that completes from them (``default-max-batch-size``) overrides this method instead.
        """
        del options
        cls.auto_complete_config(config, model_path)

    @classmethod
    def convert_input(cls, model: str, name: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:  # noqa: ARG003
        """Per-request input conversion, run at validation time so a bad request fails alone.

        Runs on the event loop: keep it cheap. The default passes arrays through unchanged.
        """
        return array

    @abstractmethod
    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        """Run one (possibly merged) batch; called from the instance's own thread."""

    def execute_into(
        self,
        inputs: Mapping[str, npt.NDArray[Any]],
        output_names: Sequence[str],
        buffers: Mapping[str, npt.NDArray[Any]],
    ) -> dict[str, npt.NDArray[Any]]:
        """:meth:`execute` for one request whose outputs go to a client's shared memory.

        ``buffers`` are writable views of those regions, shaped and typed as the outputs will be; a
        backend that can run straight into them returns them (the server then copies nothing). The
        default ignores them.
        """
        del buffers
        return self.execute(inputs, output_names)

    def execute_batch(self, batch: Batch) -> dict[str, npt.NDArray[Any]]:
        """Run one batch, seeing the requests it was merged from; called from the instance's own thread.

        The runtime calls this. The default runs :meth:`execute_into` for a request alone whose outputs
        go to shared memory, :meth:`execute` otherwise; override it for per-request context.
        """
        if batch.output_buffers:
            return self.execute_into(batch.inputs, batch.output_names, batch.output_buffers)
        return self.execute(batch.inputs, batch.output_names)

    @property
    def runs_on_any_thread(self) -> bool:
        """Whether this instance may also be run from another thread than its own, never two at once.

        True lets a version whose executions take a few µs run on the event loop (``sonic serve
        --inline-execution-us``, :mod:`sonic.server.runtime.inline`); a backend says so only when nothing
        of it is bound to the thread that created it, and its executions cannot wait for the event loop
        (model code that calls other models does).
        """
        return False

    def close(self) -> None:  # noqa: B027
        """Release resources; called once, from the instance's own thread."""

    @classmethod
    def create_scheduler(cls, context: InstanceContext) -> RequestScheduler | None:
        """A scheduler for backends that need no instance (ensembles); None: instances and the batcher.

        Called on the event loop, once per model version; ``context.instance_name`` is the model name.
        """
        del context
        return None


@dataclass(frozen=True)
class Request:
    """One request of a batch: handed to a :class:`RequestBackend`, described in a :class:`Batch`."""

    inputs: Mapping[str, npt.NDArray[Any]]
    output_names: Sequence[str]  # what the client asked for (every output when it named none)
    request_id: str = ""
    parameters: Mapping[str, object] = field(default_factory=dict)
    # Set for a decoupled model (``model_transaction_policy { decoupled: true }``): the request's
    # responses go here, sent by the backend, and its result from execute_requests is ignored.
    responses: ResponseChannel | None = None
    trace: RequestTrace | None = None  # Triton's trace of it, when sampled (a BLS call may be its child)


@dataclass(frozen=True)
class Batch:
    """One execution of a :class:`Backend`: the merged inputs and the requests they came from."""

    inputs: Mapping[str, npt.NDArray[Any]]  # the requests' inputs, concatenated along the batch dimension
    output_names: Sequence[str]  # every output of the model: the runtime splits them per request
    requests: Sequence[Request]  # in merge order, each with its own (unmerged) inputs
    rows: Sequence[
        slice
    ]  # each request's rows of ``inputs`` and of the outputs (all rows: no batch dimension)
    # Writable views of a client's shared memory for the outputs of a request that runs alone.
    output_buffers: Mapping[str, npt.NDArray[Any]] | None = None


class RequestBackend(Backend):
    """A backend that answers each request of a batch separately (Triton's Python backend model)."""

    @abstractmethod
    def execute_requests(self, requests: Sequence[Request]) -> list[dict[str, npt.NDArray[Any]] | Exception]:
        """One result per request, in order: its outputs, or the error that fails only that request."""

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        (result,) = self.execute_requests([Request(inputs, output_names)])
        if isinstance(result, Exception):
            raise result
        return result
