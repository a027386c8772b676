"""What a call with a known input signature needs, worked out once: the common call's short path.

Most jobs call one model with the same input names, dtypes and shapes over and over. The first call
of a signature is checked in full (:func:`sonic.client.batching.check_inputs`, output names,
batching, shared-memory size); when it may take the short path its :class:`CallPlan` is kept, keyed
by the signature, and later calls with that signature skip the checks (they would pass again: they
depend on nothing else) and send through a :class:`~sonic.client.transport.base.RequestTemplate`
the transport encoded once. A plan belongs to the model metadata it was made from: the client drops
its plans when it reads the metadata again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sonic.client import batching
from sonic.client.config import ClientConfig
from sonic.client.inflight import InFlight
from sonic.client.registry import ServerEntry
from sonic.client.results import Arrays, decode_outputs, output_bytes
from sonic.client.shm import layout
from sonic.client.transport.base import ModelInfo, RequestTemplate
from sonic.protocol import dtypes
from sonic.protocol.types import WireResponse

MAX_PLANS = 256
COPY_BELOW_BYTES = 16 << 10  # signatures kept per client; more (ragged shapes) start the cache again
# A call's signature: requested outputs, then (name, dtype, shape) per input in the given order.
Signature = tuple[Any, ...]


class CallPlan:
    """One input signature's checked facts and request template (see the module docstring)."""

    __slots__ = ("copy_inputs", "decoders", "model", "names", "shm_bytes", "template")

    def __init__(
        self, model: str, template: RequestTemplate, shm_bytes: int, input_bytes: int, info: ModelInfo
    ) -> None:
        self.model = model
        self.template = template
        self.names = list(template.outputs)
        self.shm_bytes = shm_bytes  # the shared-memory region a call would need
        # Small inputs are copied (one C call; the transport joins them into one buffer anyway),
        # larger ones go out as views of the caller's arrays.
        self.copy_inputs = input_bytes <= COPY_BELOW_BYTES
        specs = {t.name: t for t in info.outputs}
        # (name, datatype, numpy dtype) per output, for decoding without lookups.
        self.decoders = [
            (n, specs[n].datatype, dtypes.from_name(specs[n].datatype).numpy) for n in self.names
        ]

    def tensor_data(self, arrays: Arrays) -> list[bytes | memoryview]:
        """Each input's bytes (the plan's inputs are never BYTES)."""
        if self.copy_inputs:
            return [a.tobytes() for a in arrays.values()]
        return [memoryview(a.reshape(-1).view(np.uint8)) for a in arrays.values()]  # type: ignore[arg-type]

    def decode(self, response: WireResponse) -> Arrays:
        """The outputs, viewing the response's bytes. Anything unusual (another order, BYTES, a size
        that does not fit) takes :func:`~sonic.client.results.decode_outputs`, with its errors."""
        outputs: Arrays = {}
        given = response.outputs
        if len(given) != len(self.decoders):
            return decode_outputs(self.model, response, self.names, None, {})
        for output, (name, datatype, numpy) in zip(given, self.decoders, strict=True):
            if output.name != name or output.datatype != datatype or datatype == "BYTES":
                return decode_outputs(self.model, response, self.names, None, {})
            # A size or shape that does not fit fails here (ValueError, or a -1 that reshape resolved):
            # the full decoder then says what is wrong.
            array: npt.NDArray[Any] | None
            try:
                array = np.frombuffer(output.data, dtype=numpy).reshape(output.shape)
            except ValueError:
                array = None
            if array is None or array.shape != output.shape:
                return decode_outputs(self.model, response, self.names, None, {})
            outputs[name] = array
        return outputs


def signature(inputs: Mapping[str, Any], outputs: Sequence[str] | None) -> tuple[Signature, Arrays]:
    """The call's signature and its inputs as C-contiguous arrays (no copy for such arrays)."""
    arrays: Arrays = {}
    key: list[Any] = [None if outputs is None else tuple(outputs)]
    for name, value in inputs.items():
        array = np.ascontiguousarray(value)
        arrays[name] = array
        key.append((name, array.dtype, array.shape))
    return tuple(key), arrays


def make_plan(
    model: str,
    info: ModelInfo,
    version: str,
    config: ClientConfig,
    arrays: Arrays,
    outputs: Sequence[str] | None,
) -> CallPlan | None:
    """The plan of a signature, after the full checks (their errors raised here); None when its calls
    need the full path: batch 0 or split, merged in flight, BYTES inputs."""
    arrays, batch = batching.check_inputs(info, arrays)
    names = batching.output_names(info, outputs)
    if batch == 0 or (info.max_batch_size > 0 and batch > info.max_batch_size):
        return None
    if config.coalesce_in_flight and 0 < batch < info.max_batch_size:
        return None
    datatypes = {t.name: t.datatype for t in info.inputs}
    if any(datatypes[n] == "BYTES" for n in arrays):
        return None  # their bytes are encoded per call, and their size varies
    template = RequestTemplate(
        model,
        version,
        tuple((n, datatypes[n], tuple(a.shape)) for n, a in arrays.items()),
        tuple(names),
        config.timeout_s,
    )
    # The region Tries.call would ask for: whether a local server's call uses shared memory.
    out_sizes = output_bytes(info, names, batch if info.max_batch_size > 0 else 1) or {}
    shm_bytes = layout("", out_sizes, layout("", {n: a.nbytes for n, a in arrays.items()})[1])[1]
    return CallPlan(model, template, shm_bytes, sum(a.nbytes for a in arrays.values()), info)


class PlanCache:
    """One client's plans by signature, for the metadata they were made from (dropped when it changes);
    None for a signature whose calls take the full path. At most :data:`MAX_PLANS`."""

    def __init__(self, model: str, version: str, config: ClientConfig) -> None:
        self._model = model
        self._version = version
        self._config = config
        self._plans: dict[Signature, CallPlan | None] = {}
        self._info: ModelInfo | None = None

    def get(
        self, info: ModelInfo, key: Signature, arrays: Arrays, outputs: Sequence[str] | None
    ) -> CallPlan | None:
        """The signature's plan, made (its checks raising their errors) when it is new."""
        if info is not self._info:
            self._plans.clear()
            self._info = info
        try:
            return self._plans[key]
        except KeyError:
            pass
        plan = make_plan(self._model, info, self._version, self._config, arrays, outputs)
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        self._plans[key] = plan
        return plan


class FirstTry(NamedTuple):
    """A planned call's first try, for a caller that sends it itself (:mod:`sonic.client.blocking`)."""

    entry: ServerEntry
    info: ModelInfo
    plan: CallPlan
    arrays: Arrays
    request_id: str
    slots: InFlight
