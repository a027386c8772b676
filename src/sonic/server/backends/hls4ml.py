"""hls4ml backend: FPGA firmware served without the FPGA, through hls4ml's bit-accurate C simulation.

``backend: "hls4ml"`` in config.pbtxt; the version folder holds an hls4ml project (``hls4ml_prj/``) or a
PyTorch module (``model.pt``) that is converted and compiled at load and cached
(:mod:`sonic.server.backends.hls4ml_build`). One FP32 input, FP32 outputs, as the config declares them.
At the edges the firmware's bridge converts floats to the input's fixed-point type and the results
back, so the outputs are exactly those of hls4ml's ``predict``: what the card would compute.

The model runs on an :class:`~sonic.server.backends.fpga.FpgaDevice`; here :class:`EmulatedFpga`, a
real card's driver in its place. A (dynamically batched) request is cut into kernel batches, submitted
together so that several buffers are in flight, and gathered in order.

Config ``parameters`` (or ``--backend-config hls4ml,KEY=VALUE``):

- ``kernel_batch`` (default 0): rows per kernel call; the last one is padded with zeros to that size,
  as a card with a fixed-batch kernel needs. 0: the request is cut into ``buffers_in_flight`` parts.
- ``buffers_in_flight`` (default 2): kernel batches on the device at once.
- ``hls4ml_precision`` (``ap_fixed<16,6>``), ``hls4ml_reuse_factor`` (1), ``hls4ml_strategy``
  (``Latency``), ``hls4ml_io_type`` (``io_parallel``): conversion of ``model.pt``.
- ``cache_dir`` (default ``$XDG_CACHE_HOME/sonic/hls4ml``): compiled projects, by content hash; from
  ``--backend-config hls4ml,cache_dir=DIR`` only (the server writes there: not a configuration's choice).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import ModelConfigError
from sonic.server.backends.base import Backend, InstanceContext
from sonic.server.backends.fpga import EmulatedFpga
from sonic.server.backends.hls4ml_build import PROJECT_DIR, Conversion, build, find_source


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sonic" / "hls4ml"


def _int_parameter(context: InstanceContext, key: str, default: int, minimum: int) -> int:
    text = context.parameter(key)
    try:
        value = int(text) if text is not None else default
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ModelConfigError(
            f"model '{context.config.name}': parameter {key} = {text!r}, expected an integer >= {minimum}"
        )
    return value


class Hls4mlBackend(Backend):
    name = "hls4ml"
    default_filename = PROJECT_DIR

    def __init__(self, context: InstanceContext) -> None:
        config = context.config
        self.model = config.name
        if len(config.input) != 1 or not config.output:
            raise ModelConfigError(
                f"model '{self.model}': the hls4ml backend takes one input and at least one output, "
                f"config has {len(config.input)} inputs and {len(config.output)} outputs"
            )
        for tensor in [*config.input, *config.output]:
            if tensor.data_type != model_config_pb2.TYPE_FP32:
                given = model_config_pb2.DataType.Name(tensor.data_type)
                raise ModelConfigError(
                    f"model '{self.model}': '{tensor.name}' is {given}, expected TYPE_FP32"
                )
        self.batched = config.max_batch_size > 0
        self.input_name = config.input[0].name
        self.output_dims = {t.name: tuple(int(d) for d in t.dims) for t in config.output}
        input_dims = tuple(int(d) for d in config.input[0].dims)
        conversion = Conversion(
            precision=context.parameter("hls4ml_precision") or Conversion.precision,
            reuse_factor=_int_parameter(context, "hls4ml_reuse_factor", Conversion.reuse_factor, 1),
            strategy=context.parameter("hls4ml_strategy") or Conversion.strategy,
            io_type=context.parameter("hls4ml_io_type") or Conversion.io_type,
        )
        self.kernel_batch = _int_parameter(context, "kernel_batch", 0, 0)
        if "cache_dir" in config.parameters:
            # A folder the server writes to and loads a library from: the operator's choice, never a
            # configuration's (a model-control caller sends whole configurations).
            raise ModelConfigError(
                f"model '{self.model}': parameters cache_dir is not taken from a model configuration; "
                "set it with --backend-config hls4ml,cache_dir=DIR"
            )
        cache = Path(context.options.get("cache_dir") or default_cache_dir())
        source = find_source(context.version_dir)
        bridge = build(context.version_file("hls4ml source", source.name), conversion, input_dims, cache)
        expected_out = [math.prod(dims) for dims in self.output_dims.values()]
        if bridge.input_size != math.prod(input_dims) or list(bridge.output_sizes) != expected_out:
            raise ModelConfigError(
                f"model '{self.model}': the firmware takes {bridge.input_size} values and gives "
                f"{list(bridge.output_sizes)}; the config says {math.prod(input_dims)} and {expected_out}"
            )
        self.device = EmulatedFpga(
            bridge, device_id=context.device_id, buffers=_int_parameter(context, "buffers_in_flight", 2, 1)
        )

    def _kernel_batches(self, rows: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
        count = rows.shape[0]
        if self.kernel_batch == 0:
            size = max(1, math.ceil(count / self.device.buffers))
            return [rows[i : i + size] for i in range(0, count, size)]
        padded = math.ceil(count / self.kernel_batch) * self.kernel_batch
        if padded != count:  # the kernel takes fixed batches: zeros after the last row
            rows = np.concatenate([rows, np.zeros((padded - count, rows.shape[1]), dtype=np.float32)])
        return [rows[i : i + self.kernel_batch] for i in range(0, padded, self.kernel_batch)]

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        array = np.asarray(inputs[self.input_name], dtype=np.float32)
        count = array.shape[0] if self.batched else 1
        rows = np.ascontiguousarray(array).reshape(count, -1)
        if count == 0:
            return {
                n: np.zeros((0, *d), dtype=np.float32)
                for n, d in self.output_dims.items()
                if n in output_names
            }
        # Every kernel batch is submitted before any is awaited: the device keeps its buffers busy.
        futures = [self.device.submit(batch) for batch in self._kernel_batches(rows)]
        parts = [future.result() for future in futures]
        outputs = {}
        for index, (name, dims) in enumerate(self.output_dims.items()):
            if name in output_names:
                flat = np.concatenate([part[index] for part in parts])[:count]
                outputs[name] = flat.reshape((count, *dims) if self.batched else dims)
        return outputs

    def close(self) -> None:
        self.device.close()
