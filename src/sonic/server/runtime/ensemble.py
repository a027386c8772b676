"""The ensemble scheduler (Triton's ``platform: "ensemble"``): a graph of other loaded models.

An ensemble has no instance and no batcher of its own: its :class:`EnsembleScheduler` runs each
request on the event loop. Every step is a task that waits for the tensors its ``input_map``
names and then calls its model through the server's :class:`StepCaller`, so steps run as soon as
their inputs exist, independent steps run at the same time, and each step is batched with the
other requests for its model. Intermediate tensors stay numpy arrays in this process.

As Triton's ensemble scheduler, every step request carries the ensemble request's parameters: the
sequence id and start/end flags (a sequence-batched step, such as a streaming "snapshotter", keeps
each sequence's implicit state across the ensemble's requests), priority, timeout and the custom
parameters (:func:`step_parameters`). Beyond Triton, the requests of one sequence enter every step in
the order they reached the ensemble (:class:`SequenceOrder`), so a later update cannot overtake an
earlier one at a stateful step behind a stateless step with several instances.

The graph is checked when the ensemble loads (every tensor produced once, every input available,
no cycle). The manager loads an ensemble only when every step model has a ready version and unloads
it with a step (``server/models/ensemble_steps.py``); step models are still looked up per request, so a
step being reloaded fails the request with that model's own UNAVAILABLE/NOT_FOUND error.

:class:`EnsembleBackend` is the platform's entry in the backend registry (``sonic.server.backends``
names it by module path, as it names every backend): it checks the graph at load and hands the
manager this scheduler instead of instances. It lives here, with the scheduler, so that the backends
never import the runtime (``tests/unit/test_layering.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, ModelConfigError, SonicError, UnavailableError
from sonic.server.backends.base import Backend, InstanceContext, ModelCall
from sonic.server.metrics.stats import RequestTiming
from sonic.server.trace.requests import RequestTrace
from sonic.server.work import ItemOutputs, WorkItem

Arrays = dict[str, npt.NDArray[Any]]

# How the client wants its outputs encoded (HTTP binary or JSON): a matter between the client and the
# ensemble, meaningless for the arrays handed from step to step.
_CLIENT_ONLY_PARAMETERS = frozenset({"binary_data_output"})


class StepCaller(Protocol):
    """Calls a step model of the same server (``sonic.server.calls.caller.ServerModelCaller``)."""

    async def infer(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]: ...


# One request's place in its sequence: the events of the request before it (None: first in flight), its own.
Turns = tuple[tuple[asyncio.Event, ...] | None, tuple[asyncio.Event, ...]]


class SequenceOrder:
    """Requests of one sequence enter each step in the order they reached the ensemble.

    Each request of a sequence gets one event per step, set once it has entered that step (or never
    will: it failed); the next request of the sequence waits for it before entering the same step.
    Entering is synchronous up to the step's queue (``submit`` admits before it first waits), so the
    waiter, woken by the event, always finds its predecessor admitted. Only the last request of each
    sequence in flight is remembered.
    """

    def __init__(self, steps: int) -> None:
        self._steps = steps
        self._last: dict[object, tuple[asyncio.Event, ...]] = {}

    def join(self, correlation_id: object) -> Turns:
        """A new request of the sequence ``correlation_id``: it comes after the last one in flight."""
        own = tuple(asyncio.Event() for _ in range(self._steps))
        previous = self._last.get(correlation_id)
        self._last[correlation_id] = own
        return previous, own

    def leave(self, correlation_id: object, own: tuple[asyncio.Event, ...]) -> None:
        for event in own:
            event.set()  # a step it never entered: the next request need not wait for it
        if self._last.get(correlation_id) is own:
            del self._last[correlation_id]


def correlation_id(parameters: Mapping[str, object]) -> int | str | None:
    """The request's sequence id; None when it belongs to no sequence."""
    value = parameters.get("sequence_id")
    if isinstance(value, bool) or not isinstance(value, int | str) or value in (0, ""):
        return None
    return value


def step_parameters(parameters: Mapping[str, object]) -> dict[str, object]:
    """What a step request carries of the ensemble request's parameters.

    Triton's ensemble scheduler copies the correlation id, the start/end flags, the priority, the
    timeout and the custom parameters of the ensemble request into every step request.
    """
    return {key: value for key, value in parameters.items() if key not in _CLIENT_ONLY_PARAMETERS}


@dataclass(frozen=True)
class Step:
    index: int
    model_name: str
    model_version: str  # "": the latest ready version (Triton's -1)
    input_map: Mapping[str, str]  # step model input -> ensemble tensor
    output_map: Mapping[str, str]  # step model output -> ensemble tensor

    def describe(self, ensemble: str) -> str:
        return f"ensemble '{ensemble}' step {self.index} (model '{self.model_name}')"


@dataclass(frozen=True)
class EnsemblePlan:
    name: str
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> EnsemblePlan:
        name = config.name
        if not config.HasField("ensemble_scheduling") or not config.ensemble_scheduling.step:
            raise ModelConfigError(f"ensemble '{name}': ensemble_scheduling declares no step")
        inputs = tuple(tensor.name for tensor in config.input)
        outputs = tuple(tensor.name for tensor in config.output)
        producer: dict[str, int] = {}
        steps = []
        for index, proto in enumerate(config.ensemble_scheduling.step):
            if not proto.model_name:
                raise ModelConfigError(f"ensemble '{name}': step {index} has no model_name")
            if proto.model_name == name:
                raise ModelConfigError(f"ensemble '{name}': step {index} calls the ensemble itself")
            step = Step(
                index,
                proto.model_name,
                "" if proto.model_version < 0 else str(proto.model_version),
                dict(proto.input_map),
                dict(proto.output_map),
            )
            if not step.output_map:
                raise ModelConfigError(f"{step.describe(name)}: output_map is empty")
            for tensor in step.output_map.values():
                if tensor in inputs:
                    raise ModelConfigError(f"{step.describe(name)} writes '{tensor}', an ensemble input")
                if tensor in producer:
                    raise ModelConfigError(
                        f"{step.describe(name)} writes '{tensor}', which step {producer[tensor]} writes too"
                    )
                producer[tensor] = index
            steps.append(step)
        for step in steps:
            for tensor in step.input_map.values():
                if tensor not in inputs and tensor not in producer:
                    raise ModelConfigError(
                        f"{step.describe(name)} reads '{tensor}', which is neither an ensemble input "
                        f"{list(inputs)} nor written by any step"
                    )
        missing = [tensor for tensor in outputs if tensor not in producer]
        if missing:
            raise ModelConfigError(f"ensemble '{name}': no step writes the ensemble output(s) {missing}")
        plan = cls(name, tuple(steps), inputs, outputs)
        plan._check_acyclic(producer)
        return plan

    def _check_acyclic(self, producer: Mapping[str, int]) -> None:
        depends = {
            step.index: {producer[t] for t in step.input_map.values() if t in producer} for step in self.steps
        }
        done: set[int] = set()
        while len(done) < len(self.steps):
            ready = [i for i, needs in depends.items() if i not in done and needs <= done]
            if not ready:
                stuck = sorted(set(depends) - done)
                raise ModelConfigError(
                    f"ensemble '{self.name}': steps {stuck} depend on each other (a cycle)"
                )
            done.update(ready)

    @property
    def step_models(self) -> tuple[str, ...]:
        """The models the steps call, each once, in step order."""
        return tuple(dict.fromkeys(step.model_name for step in self.steps))

    async def run(
        self,
        caller: StepCaller,
        inputs: Mapping[str, npt.NDArray[Any]],
        request_id: str,
        parameters: Mapping[str, object] | None = None,
        turns: Turns | None = None,
        trace: RequestTrace | None = None,
    ) -> Arrays:
        """Run one request; ``turns`` (from :meth:`SequenceOrder.join`) orders it in its sequence;
        ``trace``: its trace, when sampled (each step's call is traced as its child)."""
        loop = asyncio.get_running_loop()
        previous, own = turns if turns is not None else (None, None)
        forwarded = step_parameters(parameters or {})
        tensors: dict[str, asyncio.Future[npt.NDArray[Any]]] = {}
        for step in self.steps:
            for tensor in step.output_map.values():
                tensors[tensor] = loop.create_future()
        for name, array in inputs.items():
            tensors[name] = loop.create_future()
            tensors[name].set_result(array)

        async def run_step(step: Step) -> None:
            # An optional ensemble input the request left out is left out of the step's request too (as
            # Triton): the step model takes it if its own input is optional, and refuses it otherwise.
            step_inputs = {
                key: await tensors[value] for key, value in step.input_map.items() if value in tensors
            }
            if previous is not None:
                await previous[step.index].wait()
            if own is not None:
                own[step.index].set()  # the caller below reaches the step's queue before a waiter runs
            try:
                outputs = await caller.infer(
                    ModelCall(
                        step.model_name,
                        step.model_version,
                        step_inputs,
                        list(step.output_map),
                        request_id,
                        forwarded,
                        trace.child() if trace is not None else None,
                    )
                )
            except SonicError as exc:
                raise type(exc)(f"{step.describe(self.name)}: {exc}") from None
            for key, value in step.output_map.items():
                tensors[value].set_result(outputs[key])

        try:
            async with asyncio.TaskGroup() as group:
                for step in self.steps:
                    group.create_task(run_step(step), name=f"{self.name}:step{step.index}")
        except* SonicError as errors:
            raise errors.exceptions[0] from None
        except* Exception as errors:  # noqa: BLE001  (a bug, not a model error: still one clear INTERNAL status)
            raise InternalError(f"ensemble '{self.name}': {errors.exceptions[0]!r}") from None
        return {name: tensors[name].result() for name in self.outputs}


class EnsembleScheduler:
    """Runs ensemble requests as they come (no queue: the step models queue and batch)."""

    def __init__(self, plan: EnsemblePlan, caller: StepCaller) -> None:
        self._plan = plan
        self._caller = caller
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        self._order = SequenceOrder(len(plan.steps))

    @property
    def queued(self) -> int:
        return 0

    def start(self) -> None:
        """Nothing to start: requests run in their callers' tasks."""

    async def submit(self, item: WorkItem) -> tuple[ItemOutputs, RequestTiming]:
        if self._closing:
            raise UnavailableError(f"ensemble '{self._plan.name}' is unloading and accepts no new requests")
        self._running += 1
        self._idle.clear()
        started = time.perf_counter_ns()
        sequence = correlation_id(item.parameters)
        turns = self._order.join(sequence) if sequence is not None else None
        try:
            outputs = await self._plan.run(
                self._caller, item.inputs, item.request_id, item.parameters, turns, item.trace
            )
        finally:
            if sequence is not None and turns is not None:
                self._order.leave(sequence, turns[1])
            self._running -= 1
            if not self._running:
                self._idle.set()
        timing = RequestTiming(
            queue_ns=0,
            compute_input_ns=0,
            compute_infer_ns=time.perf_counter_ns() - started,
            compute_output_ns=0,
        )
        return outputs, timing

    async def close(self, timeout_s: float) -> None:
        """Stop intake and give running requests ``timeout_s`` to finish (their callers own them)."""
        self._closing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)


class EnsembleBackend(Backend):
    """The ``ensemble`` platform's registry entry: no model file, a graph check at load, this scheduler."""

    name: ClassVar[str] = "ensemble"
    default_filename: ClassVar[str] = ""  # an ensemble has no model file

    @classmethod
    def auto_complete_config(cls, config: model_config_pb2.ModelConfig, model_path: Path) -> None:
        del model_path
        EnsemblePlan.from_config(config)  # refuse a broken graph at load time

    @classmethod
    def create_scheduler(cls, context: InstanceContext) -> EnsembleScheduler:
        if context.models is None:
            raise ModelConfigError(f"ensemble '{context.config.name}' needs a server to call its step models")
        return EnsembleScheduler(EnsemblePlan.from_config(context.config), context.models)

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        # Never reached: create_scheduler always answers, so the manager creates no instance.
        del inputs, output_names
        msg = "ensembles run through their EnsembleScheduler, not as instances"
        raise InternalError(msg)
