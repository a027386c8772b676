"""ROOT files in (through uproot) and ROOT or Parquet files out.

Optional: ``pip install 'sonic-inference[root]'`` for ROOT (uproot, awkward) and
``pip install 'sonic-inference[parquet]'`` for Parquet (pyarrow). Each event is one entry; jagged
branches become one numpy array per event, and per-event arrays of any shape are written back as
jagged (flattened) branches with their shapes in a ``<name>_shape`` branch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sonic.workflow.event import Event


def _uproot() -> Any:
    try:
        import awkward  # noqa: F401, PLC0415  (uproot needs it for jagged branches)
        import uproot  # noqa: PLC0415
    except ImportError:
        msg = "ROOT files need uproot and awkward: pip install 'sonic-inference[root]'"
        raise ImportError(msg) from None
    return uproot


def _awkward() -> Any:
    _uproot()
    import awkward  # noqa: PLC0415

    return awkward


def _columns_to_arrays(columns: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """Per-event values -> awkward/numpy columns: scalars stay flat, arrays become jagged + shape."""
    ak = _awkward()
    arrays: dict[str, Any] = {}
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns have different numbers of events: {lengths}")
    for name, values in columns.items():
        first = np.asarray(values[0]) if len(values) else np.asarray(0)
        if first.ndim == 0:
            arrays[name] = np.asarray(values)
            continue
        # Concatenated then cut by counts: keeps the dtype (building from a list of arrays would not).
        flat = [np.asarray(v).reshape(-1) for v in values]
        counts = np.array([len(f) for f in flat], dtype=np.int64)
        arrays[name] = ak.unflatten(np.concatenate(flat), counts)
        shapes = [np.asarray(np.shape(v), dtype=np.int64) for v in values]
        ndims = np.array([len(d) for d in shapes], dtype=np.int64)
        arrays[f"{name}_shape"] = ak.unflatten(np.concatenate(shapes), ndims)
    return arrays


def write_root(path: Path, columns: Mapping[str, Sequence[Any]], *, tree: str = "Events") -> Path:
    """One entry per event; e.g. :meth:`sonic.workflow.OutputCollector.columns`."""
    uproot = _uproot()
    path.parent.mkdir(parents=True, exist_ok=True)
    with uproot.recreate(str(path)) as handle:
        handle[tree] = _columns_to_arrays(columns)
    return path


def write_parquet(path: Path, columns: Mapping[str, Sequence[Any]]) -> Path:
    try:
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError:
        msg = "Parquet output needs pyarrow: pip install 'sonic-inference[parquet]'"
        raise ImportError(msg) from None
    table: dict[str, Any] = {}
    for name, values in columns.items():
        first = np.asarray(values[0]) if len(values) else np.asarray(0)
        if first.ndim == 0:
            table[name] = pa.array(np.asarray(values))
        else:
            table[name] = pa.array([np.asarray(v).reshape(-1) for v in values])
            table[f"{name}_shape"] = pa.array([list(np.shape(v)) for v in values])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(table), str(path))
    return path


def _unflatten(arrays: Mapping[str, Any], index: int, names: Sequence[str]) -> dict[str, Any]:
    products: dict[str, Any] = {}
    for name in names:
        if name.endswith("_shape") and name[: -len("_shape")] in names:
            continue
        value = arrays[name][index]
        shape_name = f"{name}_shape"
        if shape_name in arrays:
            value = np.asarray(value).reshape(tuple(int(d) for d in arrays[shape_name][index]))
        products[name] = value
    return products


def _per_event(ak: Any, column: Any) -> Any:
    """A flat column as one numpy array; a jagged one as a list of per-event arrays, dtype kept."""
    if column.ndim == 1:
        return np.asarray(ak.to_numpy(column))
    flat = np.asarray(ak.to_numpy(ak.flatten(column)))
    counts = np.asarray(ak.to_numpy(ak.num(column)))
    return np.split(flat, np.cumsum(counts)[:-1])


@dataclass(frozen=True)
class RootSource:
    """Events from a ROOT TTree, read ``step`` entries at a time; ``<name>_shape`` branches restore shapes.

    Events are numbered by entry; ``branches`` None reads every branch.
    """

    path: Path
    tree: str = "Events"
    branches: tuple[str, ...] | None = None
    step: int = 100

    def __iter__(self) -> Iterator[Event]:
        uproot = _uproot()
        ak = _awkward()
        where = f"{self.path}:{self.tree}"
        with uproot.open(str(self.path)) as handle:
            if self.tree not in handle:
                raise KeyError(f"{self.path}: no tree '{self.tree}'; present: {handle.keys()}")
            tree = handle[self.tree]
            names = list(self.branches) if self.branches is not None else list(tree.keys())
            wanted = set(names) | {f"{n}_shape" for n in names if f"{n}_shape" in tree}
            missing = sorted(set(names) - set(tree.keys()))
            if missing:
                raise KeyError(f"{where}: no branches {missing}; present: {sorted(tree.keys())}")
            first = 0
            for chunk in tree.iterate(sorted(wanted), step_size=self.step, library="ak"):
                columns = {name: chunk[name] for name in wanted}
                numpy_columns = {name: _per_event(ak, col) for name, col in columns.items()}
                for offset in range(len(chunk)):
                    yield Event(first + offset, _unflatten(numpy_columns, offset, sorted(wanted)))
                first += len(chunk)
