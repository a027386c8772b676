"""Triton's trace extension: which requests are traced, and each traced request's record.

:class:`TraceManager` holds the settings (:mod:`.settings`), the trace file writer
(:mod:`.files`) and, in OpenTelemetry mode, the tracer (:mod:`.otel`). Front ends ask it
only while :attr:`TraceManager.active` says some setting traces: with tracing off, a request pays one
attribute check. A traced request carries a :class:`RequestTrace` (in :class:`~.dataplane.Arrival`);
front end, data plane and model stamp it, and it is written when the front end has answered.

Triton mode writes Triton's trace-file objects: ``{"id":N,"model_name":...,"model_version":V}`` (with
``request_id`` when the request has one), one ``{"id":N,"timestamps":[{"name":...,"ns":...}]}`` per
activity (monotonic nanoseconds, the clock Triton uses: ``HTTP_RECV_START``, ``HTTP_RECV_END``,
``REQUEST_START``, ``QUEUE_START``, ``COMPUTE_START``, ``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``,
``COMPUTE_END``, ``INFER_RESPONSE_COMPLETE``, ``REQUEST_END``, ``HTTP_SEND_START``, ``HTTP_SEND_END``; over
gRPC ``GRPC_WAITREAD_END`` and ``GRPC_SEND_START``) and, at level TENSORS, one
``{"id":N,"activity":"TENSOR_QUEUE_INPUT"|"TENSOR_BACKEND_OUTPUT","tensor":{...}}`` per tensor (a decoupled
model's outputs once per response). An ensemble's steps and a Python model's BLS calls made with its
``request.trace()`` (``exec(decoupled=True)`` too) are child traces (their own ids, ``"parent_id"``), written
with the request's.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol.types import OutputTensor
from sonic.server.metrics.stats import RequestTiming
from sonic.server.trace.config import TraceConfig, TraceLevel, TraceMode
from sonic.server.trace.files import TraceFile, TraceWriter
from sonic.server.trace.otel import OtelExport, OtelTraceContext, TracedModel
from sonic.server.trace.settings import Answer, Changes, TraceSetting, TraceSettings

log = logging.getLogger(__name__)


def _stamp(trace_id: int, name: str, ns: int) -> str:
    return f'{{"id":{trace_id},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}'


def _values(array: npt.NDArray[Any], datatype: str) -> str:
    """A tensor's elements as Triton's trace writes them: comma-separated, floats as C++ streams print them
    (six significant digits), booleans 0/1, strings quoted; FP16/BF16 as nothing, as Triton."""
    flat = np.asarray(array).reshape(-1)
    if datatype in ("FP16", "BF16"):
        return ""
    if datatype in ("FP32", "FP64"):
        return ",".join(format(float(x), "g") for x in flat.tolist())
    if datatype == "BOOL":
        return ",".join("1" if x else "0" for x in flat.tolist())
    if datatype == "BYTES":
        items = (x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in flat.tolist())
        return ",".join(f'"{json.dumps(s)[1:-1]}"' for s in items)
    return ",".join(str(int(x)) for x in flat.tolist())


def _tensor(trace_id: int, activity: str, name: str, datatype: str, array: npt.NDArray[Any]) -> str:
    tensor = {
        "name": name,
        "data": _values(array, datatype),
        "shape": ",".join(str(d) for d in np.shape(array)),
        "dtype": datatype,
    }
    return f'{{"id":{trace_id},"activity":"{activity}","tensor":{json.dumps(tensor, separators=(",", ":"))}}}'


class RequestTrace:
    """One traced request's record (Triton mode; :class:`~.trace_otel.OtelTraceContext` makes spans of it
    in OpenTelemetry mode). Its entries are kept in the order they happen, the model's line before
    ``REQUEST_START``."""

    __slots__ = (
        "_children",
        "_entries",
        "_export",
        "_next_id",
        "_parent_id",
        "_setting",
        "_tensors",
        "_timestamps",
        "id",
        "model_name",
        "model_version",
        "request_id",
    )

    def __init__(
        self,
        trace_id: int,
        setting: TraceSetting,
        export: OtelExport | None,
        next_id: Callable[[], int],
        parent_id: int = 0,
    ) -> None:
        self.id = trace_id
        self._setting = setting
        self._export = export
        self._next_id = next_id  # the server's trace ids, for the traces this one spawns
        self._parent_id = parent_id
        self._children: list[RequestTrace] = []
        self._tensors = TraceLevel.TENSORS in setting.level and export is None
        # As Triton: at level TENSORS alone, no activity (and no model line) is written, only tensors.
        self._timestamps = TraceLevel.TIMESTAMPS in setting.level
        self._entries: list[tuple[str, int] | str] = []  # (activity, ns), or a rendered object
        self.model_name = ""
        self.model_version = 0
        self.request_id = ""

    def stamp(self, name: str, ns: int = 0) -> None:
        if self._timestamps:
            self._entries.append((name, ns or time.perf_counter_ns()))

    def stamped(self, name: str) -> bool:
        """Whether the activity ``name`` is written already (a decoupled request's first response)."""
        return any(isinstance(entry, tuple) and entry[0] == name for entry in self._entries)

    def started(self, model_name: str, model_version: int, request_id: str) -> None:
        """The request reached its model version: the model's line, then ``REQUEST_START``."""
        self.model_name, self.model_version, self.request_id = model_name, model_version, request_id
        line = f'{{"id":{self.id},"model_name":{json.dumps(model_name)},"model_version":{model_version}'
        if request_id:
            line += f',"request_id":{json.dumps(request_id)}'
        if self._parent_id:
            line += f',"parent_id":{self._parent_id}'
        if self._timestamps:
            self._entries.append(line + "}")
        self.stamp("REQUEST_START")

    def queued(self, inputs: Mapping[str, npt.NDArray[Any]], input_types: Mapping[str, str]) -> None:
        """The request enters its model's queue: ``QUEUE_START`` and (level TENSORS) its inputs, written out
        now (the scheduler lets go of them once they ran)."""
        self.stamp("QUEUE_START")
        if self._tensors:
            for name, array in inputs.items():
                datatype = input_types.get(name, "")
                self._entries.append(_tensor(self.id, "TENSOR_QUEUE_INPUT", name, datatype, array))

    def executed(self, enqueued_ns: int, timing: RequestTiming, outputs: Sequence[OutputTensor]) -> None:
        """The model ran it: when it was queued and computed (from the scheduler's timing), and its outputs."""
        if enqueued_ns and self._timestamps:  # 0: a scheduler that queues nothing (an ensemble step)
            start = enqueued_ns + timing.queue_ns
            input_end = start + timing.compute_input_ns
            output_start = input_end + timing.compute_infer_ns
            for name, ns in (
                ("COMPUTE_START", start),
                ("COMPUTE_INPUT_END", input_end),
                ("COMPUTE_OUTPUT_START", output_start),
                ("COMPUTE_END", output_start + timing.compute_output_ns),
            ):
                self._entries.append((name, ns))
        self.responded(outputs)

    def responded(self, outputs: Sequence[OutputTensor]) -> None:
        """One response's output tensors (level TENSORS): a decoupled model's, as each response comes, as
        Triton writes ``TENSOR_BACKEND_OUTPUT`` for each of its responses."""
        if self._tensors:
            for tensor in outputs:
                self._entries.append(
                    _tensor(self.id, "TENSOR_BACKEND_OUTPUT", tensor.name, tensor.datatype, tensor.array)
                )

    def child(self) -> RequestTrace:
        """The trace of a request this one makes (an ensemble's step, a BLS call), written with it as
        Triton's ``parent_id`` traces are (OpenTelemetry mode: its model span is a child of this one's)."""
        child = RequestTrace(self._next_id(), self._setting, self._export, self._next_id, self.id)
        self._children.append(child)
        return child

    def _text(self) -> str:
        own = (e if isinstance(e, str) else _stamp(self.id, e[0], e[1]) for e in self._entries)
        return ",".join([*own, *(text for child in self._children if (text := child._text()))])

    def finish(self) -> None:
        """The front end answered: the trace goes to its setting's file (or its spans to the exporter)."""
        if not self.model_name:  # never reached a model (unknown, not ready): nothing to say of it
            self._setting.write("")
            return
        if self._export is not None:
            self._export.spans(self._traced_model())
            return
        self._setting.write(self._text())

    def _traced_model(self) -> TracedModel:
        return TracedModel(
            self.id,
            self._parent_id,
            self.model_name,
            self.model_version,
            self.request_id,
            tuple(e for e in self._entries if isinstance(e, tuple)),
            tuple(child._traced_model() for child in self._children if child.model_name),
        )


class TraceManager:
    """The server's trace settings, sampling and output. :meth:`start` before serving, :meth:`close` at the end."""

    def __init__(self, config: TraceConfig, *, tracer_provider: Any = None) -> None:
        self.config = config
        self._writer = TraceWriter()
        self._settings = TraceSettings(config, TraceFile(config.file, self._writer), self._changed)
        self._ids = itertools.count(1)
        self._otel = (
            OtelTraceContext(config, tracer_provider) if config.mode is TraceMode.OPENTELEMETRY else None
        )
        self.active = False  # whether some setting traces: the one check a request pays
        self._changed()

    @property
    def wants_trace_context(self) -> bool:
        """Whether the front ends pass W3C ``traceparent`` along (OpenTelemetry mode continues it)."""
        return self._otel is not None

    def _changed(self) -> None:
        self.active = any(setting.level != TraceLevel.OFF for setting in self._settings.all())
        if self._otel is not None and any(TraceLevel.TENSORS in s.level for s in self._settings.all()):
            # Triton logs this for each tensor of each traced request; once per change says it as well.
            log.error(
                "Tensor level tracing is not supported by the mode: opentelemetry "
                "(level TENSORS adds nothing to the spans)"
            )

    def start_writer(self) -> None:
        if self.config.mode is TraceMode.TRITON:
            self._writer.start()

    def begin(self, model_name: str, headers: Mapping[str, str] | None) -> RequestTrace | None:
        """A trace for a request to ``model_name`` if its setting samples it; ``headers``: its W3C trace
        headers (OpenTelemetry mode: a sampled client trace is always continued, as in Triton)."""
        setting = self._settings.of(model_name)
        export = None
        force = False
        if self._otel is not None and setting.level != TraceLevel.OFF:
            export = self._otel.export(headers)
            force = export.parent_sampled
        if not setting.sample(force):
            return None
        return RequestTrace(next(self._ids), setting, export, self._ids.__next__)

    # --- the settings API ---------------------------------------------------------------------------

    def answer(self, model: str) -> Answer:
        return self._settings.of(model).answer()

    def update(self, model: str, changes: Changes) -> Answer:
        self._settings.update(model, changes)
        return self.answer(model)

    def close(self) -> None:
        """Write what is kept and close the files (blocking: call off the loop)."""
        self._settings.retire_all()
        self._writer.close()
        if self._otel is not None:
            self._otel.close()
