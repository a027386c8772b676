"""The server's traffic recorder: rows handed over on the event loop, written by one thread, bounded.

The event loop's part is one ``deque.append`` per request (thread-safe, no lock); everything else — arrow
conversion, Parquet encoding, rotation, deleting old files — happens on the writer thread, which wakes
every ``flush_interval_s`` (and at close). Memory is bounded twice: at most ``max_pending_records`` rows
wait (later ones are counted in :attr:`TrafficLog.dropped`, never block a request), and sampled tensor
contents wait for at most ``max_pending_contents_bytes`` (past it a row is kept without its contents).
Disk is bounded too: a file is closed past ``max_file_bytes`` or ``max_file_age_s`` and the oldest
complete files are deleted while all of them together exceed ``max_total_bytes``.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.schema import COLUMNS, PARTIAL_SUFFIX, SUFFIX, arrow_schema
from sonic.traffic.signatures import Signatures

log = logging.getLogger(__name__)

Row = tuple[Any, ...]  # the values of schema.COLUMNS, in order
_MODEL = [column.name for column in COLUMNS].index("model")
assert COLUMNS[-1].name == "contents"  # record() finds the contents last, in rows and pending records
# Rows and pending records alike carry the model second (sonic.server.traffic.rows.PENDING_FIELDS).


def _rows_to_table(rows: list[Row]) -> pa.Table:
    schema = arrow_schema()
    columns = zip(*rows, strict=True)
    return pa.Table.from_arrays(
        [pa.array(v, type=f.type) for v, f in zip(columns, schema, strict=True)], schema=schema
    )


@dataclass
class _OpenFile:
    writer: pq.ParquetWriter
    partial: Path
    opened_s: float


@dataclass
class _Counters:
    written: int = 0
    dropped: int = 0
    contents_dropped: int = 0
    files: list[tuple[Path, int]] = field(default_factory=list)  # complete files, oldest first, with sizes


class TrafficLog:
    """Records rows (see :mod:`.schema`) to rotating Parquet files, one folder per model."""

    def __init__(
        self,
        config: TrafficLogConfig,
        to_table: Callable[[list[tuple[Any, ...]]], pa.Table] | None = None,
        signatures: Signatures | None = None,
    ) -> None:
        """``to_table``: makes the schema's table of what :meth:`record` was given, on the writer thread
        (the event loop then hands over only small values); None: records are rows of the schema.
        ``signatures``: the numbers ``to_table`` reads the records' input signatures from."""
        self.config = config
        self._to_table = to_table or _rows_to_table
        self.signatures = signatures or Signatures()
        self.enabled = config.enabled
        self._pending: collections.deque[Row] = collections.deque()
        self._contents_bytes = 0
        self._contents_lock = threading.Lock()
        self._sample_count = 0
        self._counters = _Counters()
        self._open: dict[str, _OpenFile] = {}
        self._stop = threading.Event()
        self._file_number = 0
        self._thread = threading.Thread(target=self._run, name="sonic-traffic-log", daemon=True)

    def start(self) -> None:
        self.config.directory.mkdir(parents=True, exist_ok=True)
        self._counters.files = self._existing_files()
        self._thread.start()

    @property
    def written(self) -> int:
        return self._counters.written

    @property
    def dropped(self) -> int:
        return self._counters.dropped

    @property
    def contents_dropped(self) -> int:
        """Rows written without their sampled contents (over ``max_contents_bytes`` or the pending bound)."""
        return self._counters.contents_dropped

    # --- on the event loop --------------------------------------------------------------------------------

    def wants_contents(self) -> bool:
        """Whether this request's input bytes are kept (every ``sample_contents_every``-th request)."""
        every = self.config.sample_contents_every
        if not every or not self.enabled:
            return False
        self._sample_count += 1
        return self._sample_count % every == 0

    def record(self, record: tuple[Any, ...]) -> None:
        """``record``: a row, or what ``expand`` makes one of; either way its last item is the contents."""
        if not self.enabled:
            return
        if len(self._pending) >= self.config.max_pending_records:
            self._counters.dropped += 1
            return
        contents = record[-1]
        if contents is not None:
            size = sum(len(piece) for piece in contents)
            with self._contents_lock:
                if size > self.config.max_contents_bytes or (
                    self._contents_bytes + size > self.config.max_pending_contents_bytes
                ):
                    record = (*record[:-1], None)
                    self._counters.contents_dropped += 1
                else:
                    self._contents_bytes += size
        self._pending.append(record)

    def close(self) -> None:
        """Write what is pending, close every file, stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    # --- on the writer thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            stopping = self._stop.wait(self.config.flush_interval_s)
            try:
                self._flush()
                self._close_files(lambda f: time.monotonic() - f.opened_s >= self.config.max_file_age_s)
            except Exception:  # a full disk must not take the server down: log, drop, go on
                log.exception("traffic log: writing under %s failed", self.config.directory)
        try:
            self._close_files(lambda _: True)
        except Exception:
            log.exception("traffic log: closing files under %s failed", self.config.directory)

    def _flush(self) -> None:
        by_model: dict[str, list[Row]] = {}
        contents_bytes = 0
        while self._pending:
            record = self._pending.popleft()
            if record[-1] is not None:
                contents_bytes += sum(len(piece) for piece in record[-1])
            by_model.setdefault(record[_MODEL], []).append(record)
        if contents_bytes:
            with self._contents_lock:
                self._contents_bytes -= contents_bytes
        for model, rows in by_model.items():
            self._write(model, rows)

    def _write(self, model: str, records: list[tuple[Any, ...]]) -> None:
        schema = arrow_schema()
        table = self._to_table(records)
        current = self._open.get(model)
        if current is None:
            folder = self.config.directory / model
            folder.mkdir(exist_ok=True)
            self._file_number += 1
            # Named by when it was opened, to the nanosecond: a restarted server must not reuse a name.
            opened = f"{time.strftime('%Y%m%dT%H%M%S')}.{time.time_ns() % 1_000_000_000:09d}"
            partial = folder / f"traffic-{opened}-{os.getpid()}-{self._file_number:06d}{PARTIAL_SUFFIX}"
            current = _OpenFile(pq.ParquetWriter(partial, schema), partial, time.monotonic())
            self._open[model] = current
        current.writer.write_table(table)
        self._counters.written += len(records)
        if current.partial.stat().st_size >= self.config.max_file_bytes:
            self._close_files(lambda f: f is current)

    def _close_files(self, which: Any) -> None:
        for model, open_file in list(self._open.items()):
            if not which(open_file):
                continue
            del self._open[model]
            open_file.writer.close()
            final = open_file.partial.with_name(open_file.partial.name.removesuffix(PARTIAL_SUFFIX) + SUFFIX)
            open_file.partial.rename(final)
            self._counters.files.append((final, final.stat().st_size))
        self._enforce_total()

    def _enforce_total(self) -> None:
        files = self._counters.files
        total = sum(size for _, size in files)
        while files and total > self.config.max_total_bytes:
            oldest, size = files.pop(0)
            oldest.unlink(missing_ok=True)
            total -= size

    def _existing_files(self) -> list[tuple[Path, int]]:
        found = [(p, p.stat()) for p in self.config.directory.glob(f"*/*{SUFFIX}")]
        return [(p, st.st_size) for p, st in sorted(found, key=lambda item: item[1].st_mtime_ns)]
