"""Triton's trace files, written by one thread of their own so that no request waits on a disk.

A trace file is one JSON array of Triton's trace objects. As Triton names them: traces kept until the
log frequency's count (or the trace count) is reached go together to ``<file>.<n>`` (n = 0, 1, ... per
file name), each a whole array; traces of a setting without a log frequency go to ``<file>`` itself,
opened (and truncated) at the first write, ``,`` between writes, closed with ``]`` at shutdown.

The event loop hands text to :class:`TraceWriter` and returns; the thread writes it. Memory is bounded:
past ``max_pending_bytes`` waiting to be written, traces are dropped (and counted, with a warning) rather
than held.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class _Write:
    path: str
    text: str
    whole: bool  # True: the whole array of a numbered file; False: a chunk appended to the main file


class TraceWriter:
    """The writing thread and its bounded queue. :meth:`start` before use, :meth:`close` (blocking) at the end."""

    def __init__(self, max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self._max_pending_bytes = max_pending_bytes
        self._pending: collections.deque[_Write] = collections.deque()
        self._pending_bytes = 0
        self._ready = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._open: dict[str, IO[str]] = {}  # main files: the writer thread's alone
        self.dropped = 0  # traces not written because the queue was full

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sonic-trace-writer", daemon=True)
        self._thread.start()

    def submit(self, path: str, text: str, *, whole: bool) -> None:
        """Queue ``text`` for ``path`` (never blocks): ``whole`` writes ``[text]`` as the file, else ``text``
        is the next chunk of the main file."""
        with self._ready:
            if self._closing or self._thread is None:
                return
            if self._pending_bytes + len(text) > self._max_pending_bytes:
                if not self.dropped:
                    log.warning(
                        "trace writer: %d bytes waiting for the disk; traces are dropped until it catches up",
                        self._pending_bytes,
                    )
                self.dropped += 1
                return
            self._pending.append(_Write(path, text, whole))
            self._pending_bytes += len(text)
            self._ready.notify()

    def close(self) -> None:
        """Write what is queued, close the main files with ``]``, end the thread (blocking: call off the loop)."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        if self._thread is not None:
            self._thread.join()
        if self.dropped:
            log.warning("trace writer: %d trace(s) dropped (the disk did not keep up)", self.dropped)

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._pending and not self._closing:
                    self._ready.wait()
                if not self._pending:
                    break
                write = self._pending.popleft()
                self._pending_bytes -= len(write.text)
                idle = not self._pending
            try:
                self._write(write, flush=idle)
            except OSError as exc:  # as Triton: that trace is lost, the server goes on
                log.error("failed creating trace file %s: %s", write.path, exc)  # noqa: TRY400
        for path, stream in self._open.items():
            try:
                stream.write("]")
                stream.close()
            except OSError as exc:
                log.error("failed closing trace file %s: %s", path, exc)  # noqa: TRY400

    def _write(self, write: _Write, *, flush: bool) -> None:
        if write.whole:
            with Path(write.path).open("w", encoding="utf-8") as whole:
                whole.write(f"[{write.text}]")
            return
        stream = self._open.get(write.path)
        if stream is None:
            stream = Path(write.path).open("w", encoding="utf-8")  # noqa: SIM115  (open until close)
            self._open[write.path] = stream
            stream.write("[")
        else:
            stream.write(",")
        stream.write(write.text)
        if flush:  # the queue is empty: let readers see what is there
            stream.flush()


class TraceFile:
    """One trace file name and the numbers of its ``<file>.<n>`` files (shared by every setting using it)."""

    def __init__(self, name: str, writer: TraceWriter) -> None:
        self.name = name
        self._writer = writer
        self._index = itertools.count()

    def save(self, text: str, *, to_index_file: bool) -> None:
        if to_index_file:
            self._writer.submit(f"{self.name}.{next(self._index)}", text, whole=True)
        else:
            self._writer.submit(self.name, text, whole=False)
