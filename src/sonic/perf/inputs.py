"""Input tensors for the load generator, driven by the server's model metadata and config.

Names, datatypes and per-sample dims come from ``ModelMetadata``; ``max_batch_size`` from
``ModelConfig`` says whether the first dim is the batch. Variable dims (-1) must be given with
``--shape NAME:D1,D2``. Data is random (seeded), zeros, or read from a file:

- ``.npz``: one array per input name, either one sample (the sample shape) or several stacked
  along a new first axis; requests take consecutive samples, cycling.
- ``.json``: perf_analyzer's format, ``{"data": [{"INPUT0": [values...] | {"content": [...],
  "shape": [...]}, ...}, ...]}``, one entry per sample (batched models) or per request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2

from sonic.perf.transport import PerfError
from sonic.protocol import dtypes

Arrays = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    dims: tuple[int, ...]  # per sample: without the batch dimension when the model batches


@dataclass(frozen=True)
class ModelInfo:
    name: str
    max_batch_size: int
    inputs: tuple[InputSpec, ...]
    response_cache: bool = False  # config.pbtxt's response_cache { enable: true }
    # The outputs, with the same fields (dims without the batch dimension): where shared memory puts them.
    outputs: tuple[InputSpec, ...] = ()

    @property
    def datatypes(self) -> dict[str, str]:
        return {spec.name: spec.datatype for spec in self.inputs}


def model_info(
    metadata: service_pb2.ModelMetadataResponse, config: service_pb2.ModelConfigResponse
) -> ModelInfo:
    max_batch_size = int(config.config.max_batch_size)

    def specs(tensors: Any) -> tuple[InputSpec, ...]:
        found = []
        for tensor in tensors:
            shape = tuple(int(d) for d in tensor.shape)
            found.append(InputSpec(tensor.name, tensor.datatype, shape[1:] if max_batch_size > 0 else shape))
        return tuple(found)

    return ModelInfo(
        metadata.name,
        max_batch_size,
        specs(metadata.inputs),
        response_cache=bool(config.config.response_cache.enable),
        outputs=specs(metadata.outputs),
    )


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME:D1,D2`` as perf_analyzer spells ``--shape``."""
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if sep else ()
    except ValueError:
        shape = ()
    if not name or not shape or any(d <= 0 for d in shape):
        raise PerfError(f"--shape {text!r}: expected NAME:D1,D2,... with positive dims")
    return name, shape


def resolve_shapes(info: ModelInfo, overrides: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Per-sample shape of every input; overrides must match the fixed dims and fill the -1 ones."""
    unknown = sorted(set(overrides) - {spec.name for spec in info.inputs})
    if unknown:
        raise PerfError(f"model '{info.name}': --shape for unknown input(s) {unknown}")
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in info.inputs:
        shape = overrides.get(spec.name, spec.dims)
        if len(shape) != len(spec.dims) or any(
            d >= 0 and d != s for d, s in zip(spec.dims, shape, strict=True)
        ):
            raise PerfError(
                f"model '{info.name}' input '{spec.name}': --shape {list(shape)} does not match the model's "
                f"dims {list(spec.dims)}"
            )
        if any(d < 0 for d in shape):
            raise PerfError(
                f"model '{info.name}' input '{spec.name}' has variable dims {list(spec.dims)}; "
                f"give them with --shape {spec.name}:" + ",".join("N" if d < 0 else str(d) for d in spec.dims)
            )
        shapes[spec.name] = shape
    return shapes


def _full_shape(info: ModelInfo, shape: tuple[int, ...], batch_size: int) -> tuple[int, ...]:
    return (batch_size, *shape) if info.max_batch_size > 0 else shape


def check_batch_size(info: ModelInfo, batch_size: int) -> None:
    if info.max_batch_size == 0 and batch_size != 1:
        raise PerfError(f"model '{info.name}' does not batch (max_batch_size 0); batch size must be 1")
    if info.max_batch_size > 0 and not 1 <= batch_size <= info.max_batch_size:
        raise PerfError(
            f"model '{info.name}': batch size must be in 1..{info.max_batch_size}, got {batch_size}"
        )


def synthetic_inputs(
    info: ModelInfo,
    shapes: Mapping[str, tuple[int, ...]],
    batch_size: int,
    *,
    kind: str,
    count: int,
    seed: int = 0,
) -> list[Arrays]:
    """``count`` distinct requests of random (or zero) data, so no cache sees one repeated tensor."""
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(count if kind == "random" else 1):
        arrays: Arrays = {}
        for spec in info.inputs:
            shape = _full_shape(info, shapes[spec.name], batch_size)
            datatype = dtypes.from_name(spec.datatype)
            arrays[spec.name] = _synthetic_array(datatype, shape, rng, zero=kind == "zero")
        requests.append(arrays)
    return requests


def _synthetic_array(
    datatype: dtypes.Datatype, shape: tuple[int, ...], rng: np.random.Generator, *, zero: bool
) -> npt.NDArray[Any]:
    size = int(np.prod(shape))
    if datatype.name == "BYTES":
        values = [b"" if zero else rng.bytes(8).hex().encode() for _ in range(size)]
        return np.array(values, dtype=np.object_).reshape(shape)
    if zero:
        return np.zeros(shape, dtype=datatype.numpy)
    if datatype.name == "BOOL":
        return rng.random(shape) < 0.5
    if datatype.numpy.kind in "iu":
        return rng.integers(0, 100, size=shape).astype(datatype.numpy)
    return rng.random(shape, dtype=np.float32).astype(datatype.numpy)


def _samples_from_json(path: Path, info: ModelInfo) -> list[Arrays]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PerfError(f"{path}: cannot read input data: {exc}") from None
    entries = document.get("data") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PerfError(f'{path}: expected {{"data": [{{input: values}}, ...]}} with at least one entry')
    samples = []
    for index, entry in enumerate(entries):
        arrays: Arrays = {}
        for spec in info.inputs:
            if spec.name not in entry:
                raise PerfError(f"{path}: data[{index}] has no input '{spec.name}'")
            value = entry[spec.name]
            content, shape = (
                (value["content"], value.get("shape")) if isinstance(value, dict) else (value, None)
            )
            datatype = dtypes.from_name(spec.datatype)
            if datatype.name == "BYTES":
                array = np.array([str(v).encode() for v in np.ravel(content)], dtype=np.object_)
            else:
                array = np.asarray(content, dtype=datatype.numpy)
            target = tuple(shape) if shape else tuple(d for d in spec.dims)
            if any(d < 0 for d in target):
                raise PerfError(f"{path}: data[{index}] '{spec.name}': give \"shape\" for variable dims")
            try:
                arrays[spec.name] = array.reshape(target)
            except ValueError:
                raise PerfError(
                    f"{path}: data[{index}] '{spec.name}' has {array.size} values, shape {list(target)}"
                ) from None
        samples.append(arrays)
    return samples


def _samples_from_npz(path: Path, info: ModelInfo, shapes: Mapping[str, tuple[int, ...]]) -> list[Arrays]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            loaded = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise PerfError(f"{path}: cannot read input data: {exc}") from None
    stacked: Arrays = {}
    for spec in info.inputs:
        if spec.name not in loaded:
            raise PerfError(f"{path}: no array named '{spec.name}' (has {sorted(loaded)})")
        array = loaded[spec.name]
        per_sample = len(shapes[spec.name])
        stacked[spec.name] = array[np.newaxis] if array.ndim == per_sample else array
    counts = {name: len(a) for name, a in stacked.items()}
    if len(set(counts.values())) != 1:
        raise PerfError(f"{path}: inputs hold different numbers of samples {counts}")
    return [{name: a[i] for name, a in stacked.items()} for i in range(next(iter(counts.values())))]


def inputs_from_file(
    path: Path, info: ModelInfo, shapes: Mapping[str, tuple[int, ...]], batch_size: int, *, count: int
) -> list[Arrays]:
    """Requests built from the samples in ``path``: ``batch_size`` consecutive samples each, cycling."""
    samples = (
        _samples_from_json(path, info) if path.suffix == ".json" else _samples_from_npz(path, info, shapes)
    )
    if info.max_batch_size == 0:
        return samples
    requests = []
    cursor = 0
    for _ in range(max(1, min(count, len(samples)))):
        chosen: Sequence[Arrays] = [samples[(cursor + i) % len(samples)] for i in range(batch_size)]
        cursor += batch_size
        requests.append({spec.name: np.stack([s[spec.name] for s in chosen]) for spec in info.inputs})
    return requests
