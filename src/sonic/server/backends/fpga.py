"""The interface an FPGA device driver implements for sonic, and hls4ml's C simulation behind it.

A backend for an accelerator card (:mod:`sonic.server.backends.hls4ml` is one) talks to the card through
:class:`FpgaDevice`: which card it is (``kind``, ``device_id``), how many input/output buffers the card
keeps in flight at once (``buffers``), and an asynchronous ``submit`` of one kernel batch that returns a
future. The backend cuts a (dynamically batched) request into kernel batches, submits them all, so that
up to ``buffers`` are on the card while the host prepares the next, and gathers the futures in order.

:class:`EmulatedFpga` is that interface on a compiled hls4ml project: the firmware's bit-accurate C
simulation (``<project>_float`` of its Python bridge, the function hls4ml's ``predict`` calls), one
call per sample, on ``buffers`` host threads (ctypes releases the GIL during each call). A driver for a
real card (XRT, OpenCL, a FaaST-style link) implements the same three members and reuses the backend.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt


class FpgaDevice(Protocol):
    """What a backend needs from an FPGA card's driver."""

    kind: str  # e.g. "hls4ml-csim", "xilinx-u250": reported in logs and statistics
    device_id: int  # which card of this host (the instance group's device id)
    buffers: int  # kernel batches the card holds at once (input and output buffer pairs)

    def submit(self, inputs: npt.NDArray[np.float32]) -> Future[list[npt.NDArray[np.float32]]]:
        """Start one kernel batch (rows x input size, FP32, C order); its outputs when done, in order."""
        ...

    def close(self) -> None:
        """Wait for batches in flight, then release the card."""
        ...


@dataclass(frozen=True)
class Bridge:
    """A compiled hls4ml project's Python bridge: library, top function name, flat tensor sizes."""

    library: Path
    top_function: str  # "<project>_float"
    input_size: int
    output_sizes: tuple[int, ...]


class EmulatedFpga:
    """:class:`FpgaDevice` on hls4ml's compiled C simulation of the firmware."""

    kind = "hls4ml-csim"

    def __init__(self, bridge: Bridge, *, device_id: int = 0, buffers: int = 2) -> None:
        if buffers < 1:
            raise ValueError(f"buffers in flight must be at least 1, got {buffers}")
        self.bridge, self.device_id, self.buffers = bridge, device_id, buffers
        self._function: Any = getattr(ctypes.CDLL(str(bridge.library)), bridge.top_function)
        self._function.restype = None
        self._function.argtypes = [ctypes.c_void_p] * (1 + len(bridge.output_sizes))
        self._pool = ThreadPoolExecutor(max_workers=buffers, thread_name_prefix=f"fpga{device_id}")

    def submit(self, inputs: npt.NDArray[np.float32]) -> Future[list[npt.NDArray[np.float32]]]:
        return self._pool.submit(self.run, inputs)

    def run(self, inputs: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
        """One call of the top function per sample, as hls4ml's ``predict`` does, into preallocated rows."""
        rows = np.ascontiguousarray(inputs, dtype=np.float32).reshape(-1, self.bridge.input_size)
        outputs = [np.zeros((rows.shape[0], size), dtype=np.float32) for size in self.bridge.output_sizes]
        row_in = rows.strides[0]
        row_out = [out.strides[0] for out in outputs]
        base_in = rows.ctypes.data
        base_out = [out.ctypes.data for out in outputs]
        function = self._function
        for i in range(rows.shape[0]):
            function(base_in + i * row_in, *(b + i * s for b, s in zip(base_out, row_out, strict=True)))
        return outputs

    def close(self) -> None:
        self._pool.shutdown(wait=True)
