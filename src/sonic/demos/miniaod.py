"""MiniAOD demonstrator (seed 001): four models per event, direct vs service.

Per event: the rest of MiniAOD production (calibrated CPU work, sized so the four models take the
seed's 8.8 % of the event when run directly on this CPU), then ParticleNet AK4 (8 jets) and AK8
(1 jet), DeepMET (1 event) and DeepTau (3 taus) as adjacent SONIC modules, all in flight at once.
Reported: time per event and the fraction of it in inference, direct vs service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.demos.common import EmulatedWork, calibrate, compare_outputs, plot, service, table
from sonic.demos.console import Progress
from sonic.models.zoo import registry
from sonic.workflow import (
    CpuModule,
    CpuWork,
    DirectInference,
    Event,
    Inference,
    OutputCollector,
    RunReport,
    Scheduler,
    SonicModule,
    SyntheticSource,
)

MODELS = ("particlenet_ak4", "particlenet_ak8", "deepmet", "deeptau")
SEED_ML_FRACTION = 88.1 / 993.3  # seed 001: ParticleNet + DeepMET + DeepTau, 8.8 % of 993 ms


@dataclass(frozen=True)
class MiniAodConfig:
    events: int = 8
    streams: int = 2
    rest_s: float | None = None  # None: sized so the models are the seed's 8.8 % when direct


def _batches() -> dict[str, int]:
    models = registry()
    return {name: models[name].seed_batch_size for name in MODELS}


def make_event(index: int, rng: np.random.Generator) -> dict[str, Any]:
    del index
    models = registry()
    products: dict[str, Any] = {}
    for name, batch in _batches().items():
        for key, value in models[name].make_inputs(batch, rng).items():
            products[f"{name}/{key}"] = value
    return products


class ModelModule(SonicModule):
    """Sends this model's inputs from the event; puts each output back as ``<model>/<output>``."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.inputs = registry()[model].input_names

    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        return {name: event.get(f"{self.model}/{name}") for name in self.inputs}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        for name, value in outputs.items():
            event.put(f"{self.model}/out/{name}", value)


def _outputs() -> list[str]:
    models = registry()
    return [f"{name}/out/{output}" for name in MODELS for output in models[name].output_names]


def _run(config: MiniAodConfig, inference: Inference, work: CpuWork, rest_s: float) -> Any:
    collector = OutputCollector(_outputs())
    modules: list[CpuModule | SonicModule] = [
        EmulatedWork("rest_of_miniaod", work, rest_s),
        *(ModelModule(m) for m in MODELS),
    ]
    modules.append(collector)
    scheduler = Scheduler(modules, inference, streams=config.streams)
    source = SyntheticSource(make_event, config.events, seed=1)
    report: RunReport = scheduler.run(source, progress=Progress(f"miniaod {inference.mode}", config.events))
    return report, collector.columns()


def _fractions(report: RunReport) -> dict[str, float]:
    modules = report.module_means()
    event_s = report.summary()["event_wall_mean_s"]
    inference = sum(modules[m]["inference_s"] for m in MODELS)
    ml_wall = sum(modules[m]["wall_s"] for m in MODELS)
    # Adjacent modules are in flight together, so per-module times overlap: the stream's own view is
    # its time from the first acquire to the last produce, i.e. event time minus the CPU modules.
    ml_span = event_s - modules["rest_of_miniaod"]["wall_s"] - modules["collector"]["wall_s"]
    return {
        "time_per_event_s": report.time_per_event_s,
        "event_wall_s": event_s,
        "rest_s": modules["rest_of_miniaod"]["wall_s"],
        "ml_span_s": ml_span,
        "ml_fraction": ml_span / event_s,
        "inference_sum_s": inference,
        "module_wall_sum_s": ml_wall,
        **{f"{m}_inference_s": modules[m]["inference_s"] for m in MODELS},
    }


def run(
    config: MiniAodConfig, repository: Path, server_address: str, out: Path, work: CpuWork
) -> dict[str, Any]:
    print(f"\n== miniaod: {config.events} events, {config.streams} streams, models {', '.join(MODELS)}")
    with DirectInference([repository]) as direct:
        direct.load(*MODELS)
        sample = next(iter(SyntheticSource(make_event, 1, seed=77)))
        modules = [ModelModule(m) for m in MODELS]

        def one_event() -> None:
            for module in modules:
                direct.infer(module.model, module.acquire(sample))

        # The rest is sized so the four models are the seed's fraction of the event.
        per_ml = (1 - SEED_ML_FRACTION) / SEED_ML_FRACTION
        ml_s, rest_s = calibrate(one_event, configured_s=config.rest_s, per_ml=per_ml)
        print(
            f"4 models on this CPU: {ml_s * 1e3:.1f} ms/event -> rest of MiniAOD {rest_s * 1e3:.0f} ms/event"
        )
        direct_report, reference = _run(config, direct, work, rest_s)
    with service(server_address) as inference:
        service_report, outputs = _run(config, inference, work, rest_s)
    same = compare_outputs(reference, outputs)
    results = {"direct": _fractions(direct_report), "service": _fractions(service_report)}
    rows = [
        [name, r["time_per_event_s"], r["event_wall_s"], r["rest_s"], r["ml_span_s"], 100 * r["ml_fraction"]]
        for name, r in results.items()
    ]
    print(table(["mode", "s/event", "event s", "rest s", "ML span s", "ML %"], rows))
    print(f"seed 001: ML {100 * SEED_ML_FRACTION:.1f} % of 993 ms on CPU; same outputs: {same['identical']}")
    direct_report.write_json(out / "miniaod" / "direct.json")
    service_report.write_json(out / "miniaod" / "service.json")
    _plot(out / "miniaod" / "fractions.png", results)
    return {
        "config": {**config.__dict__, "ml_direct_s": ml_s, "rest_s": rest_s},
        "runs": results,
        "seed_ml_fraction": SEED_ML_FRACTION,
        "identical": same["identical"],
        "max_abs_diff": same["max_abs_diff"],
    }


def _plot(path: Path, results: Mapping[str, Mapping[str, float]]) -> None:
    def draw(axes: Any) -> None:
        names = list(results)
        rest = [results[n]["rest_s"] for n in names]
        ml = [results[n]["ml_span_s"] for n in names]
        axes.bar(names, rest, label="rest of MiniAOD (emulated)")
        axes.bar(names, ml, bottom=rest, label="ParticleNet + DeepMET + DeepTau")
        axes.set_ylabel("seconds per event")
        axes.set_title("MiniAOD: time in inference (CPU only, no GPU)")
        axes.legend()

    plot(path, draw)


def quick(config: MiniAodConfig) -> MiniAodConfig:
    """CI size: the emulated rest of MiniAOD is fixed at 0.2 s instead of the seed's proportion (~3 s here)."""
    return replace(config, events=2, streams=2, rest_s=0.2)
