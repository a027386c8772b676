"""Transport-neutral inference requests and responses, and the request parameters they carry.

Server side, the gRPC and HTTP codecs decode into :class:`InferRequest` and encode
:class:`InferResponse`; client side, transports encode :class:`WireRequest` and decode
:class:`WireResponse` (tensor bytes, never numpy arrays: decoding lives in the client).

Request parameters travel as one mapping from the client API (``AsyncClient.infer(..., parameters=)``)
through both codecs (gRPC ``InferParameter`` map, HTTP JSON ``parameters``) to
:attr:`InferRequest.parameters` and on to backends (``Request.parameters``; a Python model reads the
custom ones as ``request.parameters()``). The codecs and the client move any name and value; only
:data:`REQUEST_PARAMETERS` gives names a meaning. Adding a parameter therefore touches about four files:

1. this module: its types in :data:`REQUEST_PARAMETERS` (and a property of :class:`InferRequest` if the
   server reads it, as :attr:`InferRequest.priority`);
2. the code that acts on it: ``sonic/server/models/version.py`` (what the scheduler gets) or the backend that
   reads ``Request.parameters`` (``sonic/server/backends/python.py`` for the Python backend's view);
3. ``docs/client.md``, the list of parameters;
4. its test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from sonic.protocol.errors import InvalidArgumentError

ParameterValue = bool | int | float | str

# Triton's request parameters and the types each may have; any other name is a custom parameter,
# handed to the model as given. As in Triton, a model's ``request.parameters()`` shows only custom ones.
REQUEST_PARAMETERS: dict[str, tuple[type, ...]] = {
    "sequence_id": (int, str),  # correlation id of a sequence (sequence batcher)
    "sequence_start": (bool,),
    "sequence_end": (bool,),
    "priority": (int,),  # priority level, 1 highest; 0: the model's default
    "timeout": (int,),  # microseconds the request may wait in the queue; 0: the model's default
    "binary_data_output": (bool,),  # HTTP: outputs as binary unless an output says otherwise
    # ModelStreamInfer: an empty response carries the final flag of a decoupled model's request when the
    # model sent that flag alone (without it, such a request's end is not seen by the client).
    "triton_enable_empty_final_response": (bool,),
}
_TYPE_NAMES = {bool: "a boolean", int: "an integer", str: "a string", float: "a number"}


def check_parameters(parameters: Mapping[str, object], where: str) -> None:
    """Raise :class:`InvalidArgumentError` when a parameter of :data:`REQUEST_PARAMETERS` has a wrong type."""
    for key, value in parameters.items():
        expected = REQUEST_PARAMETERS.get(key)
        if expected is None:
            if not isinstance(value, ParameterValue):
                raise InvalidArgumentError(  # Triton's words, then what came (a number is taken too)
                    f"{where}: parameter '{key}' has invalid type. It should be either 'int', 'bool', or "
                    f"'string'. Got {value!r}"
                )
            continue
        # bool is an int to Python, never to the protocol.
        if isinstance(value, bool) != (bool in expected) or not isinstance(value, expected):
            names = " or ".join(_TYPE_NAMES[t] for t in expected)
            raise InvalidArgumentError(f"{where}: request parameter '{key}' must be {names}, got {value!r}")


def custom_parameters(parameters: Mapping[str, object]) -> dict[str, object]:
    """The parameters a model sees: those Triton gives no meaning to."""
    return {k: v for k, v in parameters.items() if k not in REQUEST_PARAMETERS}


# --- server side ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShmRef:
    """A place in a registered system shared-memory region (parameters ``shared_memory_*``)."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(slots=True)
class InputTensor:
    """An input as received: raw bytes (zero-copy view), an already decoded array, or a region."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | memoryview | None = None
    array: npt.NDArray[Any] | None = None
    shm: ShmRef | None = None

    # Written out, here and in the other per-request classes: mypyc compiles a hand-written __init__, but
    # a generated one stays interpreted (exec'd by dataclasses at import): ~0.3-1.4 µs per object against
    # ~0.1 (docs/benchmarks.md, "issue 37: identity rate"). The dataclass keeps what it adds besides.
    def __init__(
        self,
        name: str,
        datatype: str,
        shape: tuple[int, ...],
        raw: bytes | memoryview | None = None,
        array: npt.NDArray[Any] | None = None,
        shm: ShmRef | None = None,
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.raw = raw
        self.array = array
        self.shm = shm


@dataclass(slots=True)
class InferRequest:
    """An inference request as the wire carries it, and nothing more: what the server learns or decides
    about it (arrival time, trace headers, shared memory read and placed) travels beside it."""

    model_name: str
    model_version: str
    inputs: list[InputTensor]
    request_id: str = ""
    outputs: list[str] | None = None  # None: every output of the model
    parameters: dict[str, object] = field(default_factory=dict)  # checked by check_parameters
    output_shm: dict[str, ShmRef] = field(default_factory=dict)  # outputs to write into shared memory
    # Outputs asked as classification (parameter ``classification``): their top k as text (server/classification/top_k.py).
    output_classes: dict[str, int] = field(default_factory=dict)

    def __init__(
        self,
        model_name: str,
        model_version: str,
        inputs: list[InputTensor],
        request_id: str = "",
        outputs: list[str] | None = None,
        parameters: dict[str, object] | None = None,
        output_shm: dict[str, ShmRef] | None = None,
        output_classes: dict[str, int] | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.inputs = inputs
        self.request_id = request_id
        self.outputs = outputs
        self.parameters = {} if parameters is None else parameters
        self.output_shm = {} if output_shm is None else output_shm
        self.output_classes = {} if output_classes is None else output_classes

    @property
    def priority(self) -> int:
        value = self.parameters.get("priority", 0)
        return value if isinstance(value, int) else 0

    @property
    def timeout_us(self) -> int:
        value = self.parameters.get("timeout", 0)
        return value if isinstance(value, int) else 0


@dataclass(slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    array: npt.NDArray[Any]
    shm: ShmRef | None = None  # set once written into shared memory: the body then carries no bytes

    def __init__(
        self,
        name: str,
        datatype: str,
        shape: tuple[int, ...],
        array: npt.NDArray[Any],
        shm: ShmRef | None = None,
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.array = array
        self.shm = shm


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    request_id: str
    outputs: list[OutputTensor]

    def __init__(
        self, model_name: str, model_version: str, request_id: str, outputs: list[OutputTensor]
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.request_id = request_id
        self.outputs = outputs


# --- client side ------------------------------------------------------------------------------------------


@dataclass(slots=True)  # hot path: plain slots init, no frozen setattr
class WireInput:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes | memoryview | None  # None when the tensor is in shared memory
    shm: ShmRef | None = None


@dataclass(slots=True)  # hot path: plain slots init, no frozen setattr
class WireOutputRequest:
    name: str
    shm: ShmRef | None = None
    class_count: int = 0  # > 0: the output's top k classes as BYTES (Triton's classification extension)


@dataclass(slots=True)  # hot path: plain slots init, no frozen setattr
class WireRequest:
    model: str
    version: str
    inputs: tuple[WireInput, ...]
    outputs: tuple[WireOutputRequest, ...] = ()  # empty: every output, in the response body
    request_id: str = ""
    timeout_s: float | None = None
    parameters: Mapping[str, ParameterValue] = field(default_factory=dict)  # request parameters


@dataclass(slots=True)  # hot path: plain slots init, no frozen setattr
class WireOutput:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes | memoryview  # empty when the output was written to shared memory


@dataclass(slots=True)  # hot path: plain slots init, no frozen setattr
class WireResponse:
    model: str
    version: str
    outputs: tuple[WireOutput, ...]
    serialize_ns: int = 0  # measured by the transport: building the message
    wait_ns: int = 0  # from send to the response bytes, server time and transfer included
