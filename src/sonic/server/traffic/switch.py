"""The traffic recording of ``sonic serve --traffic-log DIR``, switched on and off while serving.

The directory comes only from the command line; the log-settings API (``traffic_log``, see
:mod:`sonic.server.log_settings`) only starts and stops recording into it. Each start opens a new
:class:`sonic.traffic.writer.TrafficLog` (its own writer thread, new files); each stop detaches it first,
so no request's record reaches it afterwards, then closes it off the event loop: the rows still pending
are written, every file is closed and renamed to ``.parquet``, readable, and the thread has ended
before the stop returns. Starts and stops are taken one at a time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
from collections.abc import Callable
from typing import Protocol

from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.traffic.rows import Pending, request_row
from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.signatures import Signatures


class TrafficLogFiles(Protocol):
    """One recording: :class:`sonic.traffic.writer.TrafficLog`."""

    def start(self) -> None: ...

    def wants_contents(self) -> bool: ...

    def record(self, pending: Pending) -> None: ...

    def close(self) -> None: ...


def _open_files(config: TrafficLogConfig, signatures: Signatures) -> TrafficLogFiles:
    from sonic.server.traffic.table import pending_to_table  # noqa: PLC0415  (pyarrow, only when recording)
    from sonic.traffic.writer import TrafficLog  # noqa: PLC0415  (pyarrow, only when recording)

    return TrafficLog(config, functools.partial(pending_to_table, signatures=signatures), signatures)


def _warm_up_and_freeze() -> None:
    """pyarrow imports pandas on its first conversion (0.2 s, ~26,000 objects): here, before the server
    serves, not on the writer thread (holding the GIL) while it does. Then what is alive now — modules
    and configuration; the server calls this before it loads any model — is moved out of the garbage
    collector's reach: its full passes, ~300 ms each with pyarrow and pandas in the heap under load,
    walked it every time (docs/benchmarks.md, 2026-11-25). Nothing frozen here is ever garbage."""
    from sonic.server.traffic.table import pending_to_table  # noqa: PLC0415  (pyarrow, only when recording)

    warm_up = InferRequest("warm-up", "", [InputTensor("X", "FP32", (1,), raw=bytes(4))])
    pending_to_table([request_row(warm_up, 0, 1, None, 0)])
    gc.freeze()


class TrafficSwitch:
    """What the models record into (:class:`sonic.server.traffic.rows.TrafficRecorder`): the recording
    in progress, or nothing while it is off."""

    def __init__(
        self,
        config: TrafficLogConfig,
        open_files: Callable[[TrafficLogConfig, Signatures], TrafficLogFiles] = _open_files,
    ) -> None:
        self.config = config
        # One numbering for the server's life: records of every recording hold numbers from it.
        self.signatures = Signatures()
        self._open_files = open_files
        self._files: TrafficLogFiles | None = None
        self._changing = asyncio.Lock()

    @property
    def recording(self) -> bool:
        return self._files is not None

    @property
    def enabled(self) -> bool:
        return self._files is not None

    # --- on the event loop, per request -------------------------------------------------------------------

    def wants_contents(self) -> bool:
        return self._files is not None and self._files.wants_contents()

    def record(self, pending: Pending) -> None:
        if self._files is not None:
            self._files.record(pending)

    # --- start and stop -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """At server start: record from now on unless ``--traffic-log-start off``."""
        if self.config.enabled:
            await self.set_recording(True)

    async def set_recording(self, on: bool) -> None:
        async with self._changing:
            if on and self._files is None:
                files = self._open_files(dataclasses.replace(self.config, enabled=True), self.signatures)
                await asyncio.to_thread(files.start)  # makes the folder, lists earlier files: disk work
                self._files = files
            elif not on and self._files is not None:
                files, self._files = self._files, None
                await asyncio.to_thread(files.close)  # joins the writer thread: files closed, readable

    async def close(self) -> None:
        await self.set_recording(False)


def open_traffic_log(config: TrafficLogConfig | None) -> TrafficSwitch | None:
    """The recording ``sonic serve --traffic-log`` asks for (not started), or None."""
    if config is None:
        return None
    _warm_up_and_freeze()
    return TrafficSwitch(config)
