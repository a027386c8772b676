"""What the demonstrators share: model repositories, the preamble of a run (the models timed directly on
this CPU, the emulated rest of the event sized from it, the service client), tables, output comparison,
plots."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format

from sonic.client.config import ClientConfig
from sonic.protocol.model_config import CONFIG_FILENAME, load_config_file
from sonic.workflow import CpuModule, CpuWork, Event, ServiceInference

NO_BATCHING_SUFFIX = "_nobatch"


def build_models(
    repository: Path,
    names: Sequence[str],
    *,
    no_batching: Sequence[str] = (),
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Reference models (built once, reused by stamp) plus ``<name>_nobatch`` copies without dynamic batching.

    ``progress`` is called with the number of models built so far, after each.
    """
    from sonic.models.build import build_repository  # noqa: PLC0415  (needs torch)

    for done, name in enumerate(names, start=1):
        build_repository(repository, [name])
        if progress is not None:
            progress(done)
    for name in no_batching:
        source, target = repository / name, repository / f"{name}{NO_BATCHING_SUFFIX}"
        config = load_config_file(source / CONFIG_FILENAME)
        config.ClearField("dynamic_batching")
        config.name = target.name
        (target / "1").mkdir(parents=True, exist_ok=True)
        for item in (source / "1").iterdir():
            copy = target / "1" / item.name
            if not copy.exists() or copy.stat().st_mtime < item.stat().st_mtime:
                copy.unlink(missing_ok=True)
                try:
                    os.link(item, copy)  # same bytes, no second 50 MB file
                except OSError:
                    shutil.copy2(item, copy)
        (target / CONFIG_FILENAME).write_text(text_format.MessageToString(config))
    return repository


def calibrate(
    call: Callable[[], object], *, configured_s: float | None, per_ml: float, repeats: int = 1
) -> tuple[float, float]:
    """The preamble of every demonstrator: seconds per ``call`` (the event's models, run directly on this
    CPU; one untimed call first, which builds the runtime for these shapes, then the mean of
    ``repeats``), and the emulated rest of the event: ``configured_s``, else ``per_ml`` times that."""
    call()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    ml_s = (time.perf_counter() - start) / repeats
    return ml_s, configured_s if configured_s is not None else per_ml * ml_s


def service(address: str) -> ServiceInference:
    """Service inference through ``sonic.client`` against the demo's one server."""
    return ServiceInference(ClientConfig(servers=(address,)))


def measure_rtt_s(address: str, calls: int = 30) -> float:
    """Median round trip of an empty gRPC call (ServerReady): the per-request travel time."""
    from sonic.client.config import ClientConfig, TransportKind  # noqa: PLC0415
    from sonic.client.transport.factory import open_transport  # noqa: PLC0415

    async def probe() -> float:
        transport = open_transport(address, ClientConfig(transport=TransportKind.GRPCIO))
        try:
            await transport.server_ready()
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                await transport.server_ready()
                times.append(time.perf_counter() - start)
        finally:
            await transport.close()
        return statistics.median(times)

    return asyncio.run(probe())


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def compare_outputs(
    reference: Mapping[str, Sequence[Any]], other: Mapping[str, Sequence[Any]]
) -> dict[str, Any]:
    """Whether two runs' collected outputs are bitwise identical, and the largest difference."""
    identical = set(reference) == set(other)
    max_diff = 0.0
    for name in reference:
        if name not in other or len(reference[name]) != len(other[name]):
            identical = False
            continue
        for a, b in zip(reference[name], other[name], strict=True):
            left, right = np.asarray(a), np.asarray(b)
            if left.shape != right.shape:
                identical = False
                continue
            if not np.array_equal(left, right):
                identical = False
                if left.size:
                    diff = np.abs(left.astype(np.float64) - right.astype(np.float64))
                    max_diff = max(max_diff, float(diff.max()))
    return {"identical": identical, "max_abs_diff": max_diff}


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def plot(path: Path, draw: Callable[[Any], None]) -> Path | None:
    """Draw with matplotlib (Agg) into ``path``; None, with a note, when matplotlib is missing."""
    try:
        import matplotlib as mpl  # noqa: PLC0415

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        sys.stderr.write("plots need matplotlib: pip install 'sonic-inference[perf]'\n")
        return None
    figure, axes = plt.subplots(figsize=(7, 4.2))
    try:
        draw(axes)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)
    return path


class EmulatedWork(CpuModule):
    """The workflow's other CPU work: calibrated computation (not a sleep) for ``seconds`` per event."""

    def __init__(self, name: str, work: CpuWork, seconds: float) -> None:
        super().__init__(name)
        self.work, self.seconds = work, seconds

    def process(self, event: Event) -> None:
        self.work.run(self.seconds, seed=event.index)
