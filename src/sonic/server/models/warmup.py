"""Model warm-up: executions each instance runs at load, before its model reports ready.

Two sources of samples:

- the config's ``model_warmup`` (Triton's): each sample names its inputs with ``zero_data``,
  ``random_data`` or ``input_data_file`` (raw row-major bytes in the model's ``warmup/`` folder, one
  batch item, repeated ``batch_size`` times; the name goes through :mod:`sonic.server.models.paths`) and runs ``count`` times (0: once);
- without a ``model_warmup`` section, a model with ``dynamic_batching`` and fixed input shapes runs
  zeros at ``max_batch_size`` and at each ``preferred_batch_size``, largest first. A fresh
  onnxruntime session otherwise grows its memory arena in steps and prepares each new merged shape
  while the first traffic arrives (the likely cause of issue 13's cold start: a DeepCalo-like model
  at 58% of its steady rate in its first 8 s window). Config parameter ``warmup_merged_batches: "0"``
  turns this off.

:func:`warmup_samples` builds the samples (no model involved); :func:`run_warmup` runs them on an
instance's own thread, through the same ragged and sequence inputs the runtime adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import ModelSpec
from sonic.server.backends.base import Backend, Batch, Request, RequestBackend
from sonic.server.models.paths import WARMUP_DIR, ModelFiles
from sonic.server.runtime.ragged import RaggedPlan, merge_inputs
from sonic.server.runtime.sequences import Flags, SequencePolicy, control_tensors, state_tensors


@dataclass(frozen=True)
class WarmupSample:
    name: str
    inputs: dict[str, npt.NDArray[Any]]  # batch dimension first when the model is batched
    batch_size: int
    count: int


def _sample_input(
    model: str, sample: str, name: str, entry: Any, files: ModelFiles, rng: np.random.Generator
) -> npt.NDArray[Any]:
    datatype = dtypes.from_config_enum(entry.data_type)
    dims = tuple(int(d) for d in entry.dims)
    where = f"model '{model}' warmup '{sample}' input '{name}'"
    if any(d < 0 for d in dims):
        raise ModelConfigError(f"{where}: dims {list(dims)} must be fixed")
    kind = entry.WhichOneof("input_data_type")
    if kind == "input_data_file":
        path = files.path(f"{where} input_data_file", entry.input_data_file, WARMUP_DIR)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ModelConfigError(
                f"{where}: cannot read {WARMUP_DIR}/{entry.input_data_file}: {exc.strerror}"
            ) from None
        try:
            return dtypes.array_from_bytes(raw, datatype, dims, where)
        except InvalidArgumentError as exc:
            raise ModelConfigError(str(exc)) from None
    dtype = datatype.numpy
    if dtype == np.object_:
        return np.full(dims, b"", dtype=np.object_)
    if kind == "random_data":
        if np.issubdtype(dtype, np.floating):
            return rng.random(dims).astype(dtype)
        if dtype == np.bool_:
            return rng.integers(0, 2, dims).astype(np.bool_)
        return rng.integers(0, 100, dims).astype(dtype)
    return np.zeros(dims, dtype=dtype)


def warmup_samples(
    config: model_config_pb2.ModelConfig, spec: ModelSpec, files: ModelFiles, *, merged_batches: bool = True
) -> list[WarmupSample]:
    """The samples a model's instances run at load (see the module's docstring).

    ``merged_batches`` False: no automatic warm-up (backends that answer requests one by one, such as
    Python models, whose code may not expect made-up requests).
    """
    rng = np.random.default_rng(0)
    samples = []
    for warmup in config.model_warmup:
        batch = max(1, int(warmup.batch_size))
        inputs = {}
        for name, entry in warmup.inputs.items():
            item = _sample_input(config.name, warmup.name, name, entry, files, rng)
            inputs[name] = np.repeat(item[np.newaxis], batch, axis=0) if spec.batched else item
        samples.append(WarmupSample(warmup.name, inputs, batch, max(1, int(warmup.count))))
    if samples or not merged_batches or not config.HasField("dynamic_batching"):
        return samples
    parameter = config.parameters.get("warmup_merged_batches")
    if parameter is not None and parameter.string_value == "0":
        return []
    fixed = all(not t.has_variable_dims and t.datatype.numpy != np.object_ for t in spec.inputs.values())
    if not fixed or any(t.allow_ragged_batch for t in config.input):
        return []
    sizes = sorted({spec.max_batch_size, *config.dynamic_batching.preferred_batch_size}, reverse=True)
    return [
        WarmupSample(
            f"merged batch {size}",
            {n: np.zeros((size, *t.model_dims), dtype=t.datatype.numpy) for n, t in spec.inputs.items()},
            size,
            1,
        )
        for size in sizes
    ]


def run_warmup(
    config: model_config_pb2.ModelConfig,
    spec: ModelSpec,
    files: ModelFiles,
    backend: Backend,
    samples: Sequence[WarmupSample],
) -> None:
    """Run ``samples`` on ``backend`` (call on its instance thread); ModelConfigError names a failing one."""
    ragged = RaggedPlan.from_config(config)
    sequences = SequencePolicy.from_config(config, files) if config.HasField("sequence_batching") else None
    outputs = list(spec.outputs) + (list(sequences.state_outputs) if sequences else [])
    for sample in samples:
        inputs = dict(sample.inputs)
        if sequences is not None:  # one sequence of one request, per batch row
            extra = control_tensors(sequences, Flags(1, True, True), spec.batched)
            extra |= state_tensors(sequences, None, None, spec.batched)
            repeat = sample.batch_size if spec.batched else 1
            inputs |= {name: np.repeat(array, repeat, axis=0) for name, array in extra.items()}
        if ragged is not None:
            inputs = merge_inputs(ragged, [inputs])
        rows = [slice(0, sample.batch_size) if spec.batched else slice(None)]
        request = Request(inputs, outputs)
        try:
            for _ in range(sample.count):
                _execute(backend, Batch(inputs, outputs, [request], rows))
        except Exception as exc:  # noqa: BLE001  (any failure fails the load, named)
            raise ModelConfigError(f"model '{config.name}': warmup '{sample.name}' failed: {exc}") from None


def _execute(backend: Backend, batch: Batch) -> None:
    if not isinstance(backend, RequestBackend):
        backend.execute_batch(batch)
        return
    (result,) = backend.execute_requests(batch.requests)
    if isinstance(result, Exception):
        raise result
