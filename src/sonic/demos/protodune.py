"""ProtoDUNE demonstrator (seed 002): EmTrkMichelId on every hit's 48x48 patch, direct vs service.

Per event: a collection-plane image (480 wires x ``ticks``) with tracks and hits; the non-ML
reconstruction, emulated as calibrated CPU work in the seed's proportion (110 s non-ML for 220 s
of ML on the CPU); the EmTrkMichelId module, whose ``acquire`` cuts and normalises one patch per
hit (the seed's "preprocessing") and whose inference runs direct or through the service with
requests of 235 or 1693 patches, dynamic batching on or off.

The breakdown follows the seed's: preprocessing (acquire), transfer (the rest of the event's
inference time: serialization, bandwidth, and here also waiting behind the other stream's
executions on the one server instance), travel (requests per event x the round trip of an empty
gRPC call), server compute (the server's executions, each counted once, per event).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.demos import projection
from sonic.demos.common import (
    NO_BATCHING_SUFFIX,
    EmulatedWork,
    calibrate,
    compare_outputs,
    measure_rtt_s,
    plot,
    service,
    table,
)
from sonic.demos.console import Progress
from sonic.perf import scaling
from sonic.workflow import (
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

MODEL = "emtrk_michel"
WIRES, HALF = 480, 24
NON_ML_PER_ML = scaling.PROTODUNE_NON_ML_S / scaling.PROTODUNE_ML_CPU_S  # 110 s : 220 s
SEED_BATCHES = (235, 1693)


@dataclass(frozen=True)
class ProtoDuneConfig:
    events: int = 4
    patches: int = 1500  # per event; the seed's events have ~55,000
    ticks: int = 1000  # image length; ProtoDUNE reads 6,000 ticks
    streams: int = 2
    batch_sizes: tuple[int, ...] = SEED_BATCHES
    dynamic_batching: tuple[bool, ...] = (False, True)
    non_ml_s: float | None = None  # None: NON_ML_PER_ML x the measured direct ML time


def make_event(patches: int, ticks: int) -> Any:
    def make(index: int, rng: np.random.Generator) -> dict[str, Any]:
        del index
        image = rng.normal(0.0, 2.0, size=(WIRES, ticks)).astype(np.float32)
        # A few straight tracks of deposited charge; the hits sit on them.
        wires = rng.integers(HALF, WIRES - HALF, size=patches)
        tracks = rng.integers(4, 12)
        slopes, offsets = rng.uniform(-1.5, 1.5, tracks), rng.uniform(HALF, ticks - HALF, tracks)
        track = rng.integers(0, tracks, size=patches)
        hit_ticks = np.clip(offsets[track] + slopes[track] * (wires - WIRES / 2), HALF, ticks - HALF - 1)
        hit_ticks = hit_ticks.astype(np.int64)
        np.add.at(image, (wires, hit_ticks), rng.exponential(40.0, size=patches).astype(np.float32))
        return {"image": image, "hit_wire": wires, "hit_tick": hit_ticks}

    return make


class NonMlReco(EmulatedWork):
    """Stands in for the 110 s of non-ML reconstruction: calibrated computation, then a hit count."""

    def __init__(self, work: CpuWork, seconds: float) -> None:
        super().__init__("non_ml_reco", work, seconds)

    def process(self, event: Event) -> None:
        super().process(event)
        event.put("hit_count", int(event.get("hit_wire").shape[0]))


def cut_patches(image: npt.NDArray[np.float32], wires: npt.NDArray[Any], ticks: npt.NDArray[Any]) -> Any:
    """One 48x48 patch centred on each hit, scaled as LArSoft's PointIdAlg does (ADC / 30, clipped)."""
    windows = np.lib.stride_tricks.sliding_window_view(image, (2 * HALF, 2 * HALF))
    patches = windows[wires - HALF, ticks - HALF]
    return np.clip(patches / 30.0, -1.0, 10.0).astype(np.float32)[..., None]


class EmTrkMichelId(SonicModule):
    def __init__(self, model: str, batch_size: int) -> None:
        super().__init__(model, label="emtrk_michel_id", batch_size=batch_size)

    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        return {"main_input": cut_patches(event.get("image"), event.get("hit_wire"), event.get("hit_tick"))}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        event.put("emtrk_none_out", outputs["emtrk_none_out"])
        event.put("michel_out", outputs["michel_out"])
        event.put("track_like", int(np.count_nonzero(outputs["emtrk_none_out"].argmax(axis=1) == 0)))


def _run(
    config: ProtoDuneConfig, inference: Inference, model: str, batch: int, work: CpuWork, non_ml_s: float
) -> tuple[RunReport, dict[str, list[Any]]]:
    collector = OutputCollector(["emtrk_none_out", "michel_out"])
    scheduler = Scheduler(
        [NonMlReco(work, non_ml_s), EmTrkMichelId(model, batch), collector], inference, streams=config.streams
    )
    label = f"{inference.mode} {model} batch {batch}"
    source = SyntheticSource(make_event(config.patches, config.ticks), config.events, seed=2)
    report = scheduler.run(source, progress=Progress(label, config.events), server_models=[model])
    return report, collector.columns()


def _breakdown(report: RunReport, model: str, rtt_s: float) -> dict[str, float]:
    modules = report.module_means()
    ml = modules["emtrk_michel_id"]
    server = report.server[model]
    travel = ml["requests"] * rtt_s if report.mode == "service" else 0.0
    transfer = max(0.0, ml["inference_s"] - server["compute_s"] - travel) if report.mode == "service" else 0.0
    return {
        "non_ml_s": modules["non_ml_reco"]["wall_s"],
        "preprocessing_s": ml["acquire_s"],
        "transfer_s": transfer,
        "travel_s": travel,
        "server_compute_s": server["compute_s"],
        "server_queue_s": server["queue_s"],
        "inference_s": ml["inference_s"],
        "wait_s": ml["wait_s"],
        "requests_per_event": ml["requests"],
        "event_wall_s": report.summary()["event_wall_mean_s"],
        "time_per_event_s": report.time_per_event_s,
        "events_per_s": report.events_per_s,
    }


def run(
    config: ProtoDuneConfig, repository: Path, server_address: str, out: Path, work: CpuWork
) -> dict[str, Any]:
    print(f"\n== protodune: {config.events} events x {config.patches} patches, {config.streams} streams")
    with DirectInference([repository]) as direct:
        direct.load(MODEL)
        calibration = SyntheticSource(make_event(config.patches, config.ticks), 1, seed=99)
        event = next(iter(calibration))
        patches = cut_patches(event.get("image"), event.get("hit_wire"), event.get("hit_tick"))
        big = max(config.batch_sizes)

        def one_event() -> None:
            for first in range(0, config.patches, big):
                direct.infer(MODEL, {"main_input": patches[first : first + big]})

        ml_cpu_s, non_ml_s = calibrate(one_event, configured_s=config.non_ml_s, per_ml=NON_ML_PER_ML)
        print(f"ML on this CPU: {ml_cpu_s:.3f} s/event -> emulated non-ML work {non_ml_s:.3f} s/event")
        direct_report, reference = _run(config, direct, MODEL, big, work, non_ml_s)
    written = _write_outputs(out / "protodune", reference)
    rtt_s = measure_rtt_s(server_address)
    runs: dict[str, Any] = {"direct": {"batch": big, "dynamic_batching": True, "report": direct_report}}
    comparisons: dict[str, Any] = {}
    with service(server_address) as inference:
        for batch in config.batch_sizes:
            for dynamic in config.dynamic_batching:
                model = MODEL if dynamic else MODEL + NO_BATCHING_SUFFIX
                name = f"service b{batch} {'dyn' if dynamic else 'nodyn'}"
                report, outputs = _run(config, inference, model, batch, work, non_ml_s)
                runs[name] = {"batch": batch, "dynamic_batching": dynamic, "report": report, "model": model}
                comparisons[name] = compare_outputs(reference, outputs)
    rows, results = [], {}
    for name, item in runs.items():
        parts = _breakdown(item["report"], item.get("model", MODEL), rtt_s)
        results[name] = {"batch": item["batch"], "dynamic_batching": item["dynamic_batching"], **parts}
        results[name]["identical_to_direct"] = comparisons.get(name, {"identical": True})["identical"]
        item["report"].write_json(out / "protodune" / f"{name.replace(' ', '_')}.json")
        rows.append(
            [name, parts["non_ml_s"], parts["preprocessing_s"], parts["transfer_s"], parts["travel_s"],
             parts["server_compute_s"], parts["event_wall_s"], parts["time_per_event_s"],
             results[name]["identical_to_direct"]]
        )  # fmt: skip
    print(
        table(
            ["run", "non-ML s", "preproc s", "transfer+queue s", "travel s", "server s", "event s", "s/event",
             "same outputs"],
            rows,
        )
    )  # fmt: skip
    best = results[f"service b{big} {'dyn' if True in config.dynamic_batching else 'nodyn'}"]
    params = scaling.ScalingParams(
        cpu_serial_s=best["non_ml_s"] + best["preprocessing_s"],
        gpu_s=max(best["server_compute_s"], 1e-9),
        latency_s=best["transfer_s"] + best["travel_s"],
    )
    seed = scaling.protodune_derivation()
    prediction = {
        "cpu_serial_s": params.cpu_serial_s,
        "gpu_s": params.gpu_s,
        "latency_s": params.latency_s,
        "ideal_s": params.ideal_s,
        "predicted_clients_per_server": params.saturation_ratio,
        "seed_ratio_measured": seed["measured_knee_ratio_big_batch"],
        "seed_ratio_from_listed_times": seed["ratio_with_listed_gpu_s"],
        "seed_fractions": {
            "non_ml": scaling.PROTODUNE_NON_ML_S / 122.0,
            "preprocessing": scaling.PROTODUNE_PREPROCESS_S / 122.0,
            "bandwidth": scaling.PROTODUNE_BANDWIDTH_S / 122.0,
            "travel": scaling.PROTODUNE_TRAVEL_BIG_S / 122.0,
            "gpu": scaling.PROTODUNE_GPU_S / 122.0,
        },
    }
    print(
        f"scaling model with these timings: t_ideal {params.ideal_s:.3f} s, server {params.gpu_s:.3f} s/event "
        f"-> {params.saturation_ratio:.1f} clients per server (seed: 68 measured on T4s, 45 from its listed times)"
    )
    gpu = projection.protodune(best)
    print(projection.describe(gpu))
    _plot(out / "protodune" / "breakdown.png", results)
    return {
        "config": {**config.__dict__, "non_ml_s": non_ml_s, "ml_cpu_s": ml_cpu_s, "rtt_s": rtt_s},
        "runs": results,
        "scaling": prediction,
        "gpu_projection": gpu,
        "identical": all(c["identical"] for c in comparisons.values()),
        "outputs": written,
    }


def _write_outputs(folder: Path, columns: Mapping[str, Any]) -> list[str]:
    """The direct run's scores per event, as ROOT and Parquet files where uproot and pyarrow are installed."""
    from sonic.workflow.io import write_parquet, write_root  # noqa: PLC0415

    written = []
    for writer, name in ((write_root, "scores.root"), (write_parquet, "scores.parquet")):
        try:
            written.append(str(writer(folder / name, columns)))
        except ImportError as exc:
            print(f"not written: {name}: {exc}")
    return written


def _plot(path: Path, results: Mapping[str, Mapping[str, float]]) -> None:
    def draw(axes: Any) -> None:
        names = list(results)
        bottom = np.zeros(len(names))
        for key, label in (
            ("non_ml_s", "non-ML (emulated)"),
            ("preprocessing_s", "preprocessing"),
            ("transfer_s", "transfer + queue"),
            ("travel_s", "travel"),
            ("server_compute_s", "server compute"),
        ):
            values = np.array([results[n][key] for n in names])
            axes.bar(names, values, bottom=bottom, label=label)
            bottom += values
        axes.set_ylabel("seconds per event")
        axes.set_title("ProtoDUNE EmTrkMichelId: per-event breakdown (CPU only, no GPU)")
        axes.tick_params(axis="x", labelrotation=20)
        axes.legend(fontsize=8)

    plot(path, draw)


def quick(config: ProtoDuneConfig) -> ProtoDuneConfig:
    """The smallest run that still exercises every path (CI)."""
    return replace(config, events=2, patches=300, ticks=300, streams=2)
