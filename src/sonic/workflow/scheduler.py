"""Runs events through a path of modules on N concurrent streams.

Each stream is a thread that takes the next event and runs the path. Adjacent SONIC modules form
a group: all of them acquire and send, then all produce, so their inferences are in flight
together (as independent ExternalWork modules in CMSSW). While a stream waits for outputs, the
other streams use the CPU: that overlap is the point of the acquire/produce split. Streams here
are threads with one event each, as CMSSW with as many threads as streams.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sonic.client import batching
from sonic.workflow.event import Event
from sonic.workflow.inference import Inference
from sonic.workflow.module import Arrays, CpuModule, SonicModule
from sonic.workflow.report import EventRecord, ModuleTiming, RunReport

Module = CpuModule | SonicModule


def _groups(modules: Sequence[Module]) -> list[CpuModule | list[SonicModule]]:
    groups: list[CpuModule | list[SonicModule]] = []
    for module in modules:
        if isinstance(module, SonicModule):
            if groups and isinstance(groups[-1], list):
                groups[-1].append(module)
            else:
                groups.append([module])
        else:
            groups.append(module)
    return groups


class _Pending:
    """The requests of one SONIC module on one event, and when each finished."""

    def __init__(self, module: SonicModule, futures: list[Future[Arrays]], sent: int) -> None:
        self.module = module
        self.futures = futures
        self.bytes_sent = sent
        self.submitted = time.perf_counter()
        self.finished = self.submitted
        self._lock = threading.Lock()
        for future in futures:
            future.add_done_callback(self._done)

    def _done(self, _: Future[Arrays]) -> None:
        now = time.perf_counter()
        with self._lock:
            self.finished = max(self.finished, now)


class Scheduler:
    def __init__(self, modules: Sequence[Module], inference: Inference, *, streams: int = 1) -> None:
        if streams < 1:
            raise ValueError(f"streams must be >= 1, got {streams}")
        labels = [m.label for m in modules]
        if len(set(labels)) != len(labels):
            raise ValueError(f"module labels must be unique, got {labels}")
        self.modules = list(modules)
        self.inference = inference
        self.streams = streams
        self._groups = _groups(modules)

    def _cpu(self, module: CpuModule, event: Event) -> ModuleTiming:
        wall, cpu = time.perf_counter(), time.thread_time()
        module.process(event)
        return ModuleTiming(module.label, wall_s=time.perf_counter() - wall, cpu_s=time.thread_time() - cpu)

    def _sonic(self, group: list[SonicModule], event: Event) -> list[ModuleTiming]:
        pending: list[tuple[_Pending, float, float]] = []
        for module in group:
            wall, cpu = time.perf_counter(), time.thread_time()
            requests = module.split(module.acquire(event))
            acquire_s, acquire_cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
            futures = [self.inference.submit(module.model, r, module.outputs) for r in requests]
            sent = sum(a.nbytes for r in requests for a in r.values())
            pending.append((_Pending(module, futures, sent), acquire_s, acquire_cpu_s))
        timings = []
        for item, acquire_s, acquire_cpu_s in pending:
            waited = time.perf_counter()
            parts = [future.result() for future in item.futures]
            wait_s = time.perf_counter() - waited
            outputs = parts[0] if len(parts) == 1 else batching.join(parts)
            wall, cpu = time.perf_counter(), time.thread_time()
            item.module.produce(event, outputs)
            produce_s, produce_cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
            timings.append(
                ModuleTiming(
                    item.module.label,
                    wall_s=acquire_s + (item.finished - item.submitted) + produce_s,
                    cpu_s=acquire_cpu_s + produce_cpu_s,
                    acquire_s=acquire_s,
                    inference_s=item.finished - item.submitted,
                    wait_s=wait_s,
                    produce_s=produce_s,
                    requests=len(item.futures),
                    bytes_sent=item.bytes_sent,
                    bytes_received=sum(a.nbytes for a in outputs.values()),
                )
            )
        return timings

    def _process(self, event: Event, stream: int, origin: float) -> EventRecord:
        start = time.perf_counter()
        timings: list[ModuleTiming] = []
        for group in self._groups:
            if isinstance(group, list):
                timings.extend(self._sonic(group, event))
            else:
                timings.append(self._cpu(group, event))
        return EventRecord(event.index, stream, start - origin, time.perf_counter() - start, tuple(timings))

    def run(
        self,
        source: Iterable[Event],
        *,
        progress: Callable[[int], None] | None = None,
        server_models: Sequence[str] = (),
    ) -> RunReport:
        """Process every event of ``source``; ``progress`` is called with the count done after each.

        ``server_models``: models whose server-side statistics (queue, compute) to difference over
        the run and report per event.
        """
        events: Iterator[Event] = iter(source)
        lock = threading.Lock()
        failed = threading.Event()
        records: list[EventRecord] = []
        before = {model: self.inference.statistics(model) for model in server_models}

        def take() -> Event | None:
            with lock:
                if failed.is_set():
                    return None
                return next(events, None)

        def stream(index: int, origin: float) -> None:
            try:
                while (event := take()) is not None:
                    record = self._process(event, index, origin)
                    with lock:
                        records.append(record)
                        done = len(records)
                    if progress is not None:
                        progress(done)
            except BaseException:
                failed.set()  # the other streams stop after their current event
                raise

        origin = time.perf_counter()
        with ThreadPoolExecutor(self.streams, thread_name_prefix="sonic-stream") as pool:
            futures = [pool.submit(stream, i, origin) for i in range(self.streams)]
        wall_s = time.perf_counter() - origin
        for future in futures:
            future.result()  # re-raises the first stream's error
        records.sort(key=lambda r: r.index)
        server: dict[str, dict[str, Any]] = {}
        for model, first in before.items():
            delta = self.inference.statistics(model) - first
            count = max(1, len(records))
            server[model] = {
                "requests_per_event": delta.requests / count,
                "executions_per_event": delta.executions / count,
                "queue_s": delta.queue_ns / 1e9 / count,  # summed over the event's requests
                "compute_s": delta.execution_ns / 1e9 / count,  # each execution once
            }
        return RunReport(str(self.inference.mode), self.streams, wall_s, tuple(records), server)
