"""What a call of :class:`~sonic.client.client.AsyncClient` returns: named arrays and their timing.

Also how a response becomes arrays (decoded bytes, or views of a shared-memory region) and the
per-call summary SonicTriton's ``verbose`` prints.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from sonic.client import batching
from sonic.client.errors import ClientError
from sonic.client.shm import Region
from sonic.client.transport.base import ModelInfo, ServerTiming
from sonic.protocol import dtypes
from sonic.protocol.types import ShmRef, WireResponse

verbose_log = logging.getLogger("sonic.client.verbose")  # SonicTriton's verbose per-call summary
Arrays = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class CallTiming:
    """Client-side time of one call, in seconds; summed over the parts of a split batch."""

    serialize_s: float = 0.0
    wait_s: float = 0.0  # request sent to response received: network and server
    deserialize_s: float = 0.0
    requests: int = 0  # wire requests (more than one when the batch was split)
    tries: int = 0
    servers: tuple[str, ...] = ()
    server: ServerTiming | None = None  # verbose mode: ModelStatistics delta around the call

    def __add__(self, other: CallTiming) -> CallTiming:
        server = self.server
        if other.server is not None:
            server = other.server if server is None else server - (ServerTiming() - other.server)
        return CallTiming(
            self.serialize_s + other.serialize_s,
            self.wait_s + other.wait_s,
            self.deserialize_s + other.deserialize_s,
            self.requests + other.requests,
            self.tries + other.tries,
            tuple(dict.fromkeys(self.servers + other.servers)),
            server,
        )


@dataclass(frozen=True)
class InferResult:
    outputs: Arrays
    timing: CallTiming


def output_bytes(info: ModelInfo, names: Sequence[str], batch: int) -> dict[str, int] | None:
    """Byte size of each output when all are known in advance (no variable dims, no BYTES)."""
    specs = {t.name: t for t in info.outputs}
    sizes: dict[str, int] = {}
    for name, shape in batching.output_shapes(info, names, batch).items():
        if shape is None or specs[name].datatype == "BYTES":
            return None
        sizes[name] = dtypes.element_count(shape) * dtypes.from_name(specs[name].datatype).numpy.itemsize
    return sizes


def verbose_summary(model: str, timing: CallTiming) -> str:
    """One call as SonicTriton's ``verbose`` prints it: counts and average server-side times."""
    server = timing.server or ServerTiming()
    count = max(server.success_count, 1)
    lines = [
        f"model '{model}' on {', '.join(timing.servers)}: {timing.tries} try(s)",
        (
            f"  client: serialize {timing.serialize_s * 1e6:.0f} us, wait {timing.wait_s * 1e6:.0f} us, "
            f"deserialize {timing.deserialize_s * 1e6:.0f} us"
        ),
        f"  server: inference count {server.success_count}, execution count {server.executions}",
        (
            f"  avg queue time {server.queue_ns / count / 1e3:.0f} us, compute input "
            f"{server.compute_input_ns / count / 1e3:.0f} us, "
            f"infer {server.compute_infer_ns / count / 1e3:.0f} us, "
            f"output {server.compute_output_ns / count / 1e3:.0f} us"
        ),
    ]
    return "\n".join(lines)


def decode_outputs(
    model: str, response: WireResponse, names: list[str], region: Region | None, placed: dict[str, ShmRef]
) -> Arrays:
    """The named outputs of a response: decoded from its bytes, or read from the shared-memory region."""
    by_name = {o.name: o for o in response.outputs}
    outputs: Arrays = {}
    for name in names:
        output = by_name.get(name)
        where = f"model '{model}' output '{name}'"
        if output is None:
            raise ClientError(f"{where}: missing from the response of the server")
        placement = placed.get(name)
        if placement is not None and region is not None:
            datatype = dtypes.from_name(output.datatype)
            outputs[name] = region.read(placement.offset, datatype.numpy, output.shape)
        else:
            outputs[name] = batching.decode(output.data, output.datatype, output.shape, where)
    return outputs
