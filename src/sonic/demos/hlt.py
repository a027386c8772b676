"""HLT demonstrator (seed 000): many client jobs sending FACILE requests per event, as Dask tasks.

Each client job is one HLT process: per event, the rest of the HLT (calibrated CPU work, nine
times FACILE's own CPU time, since FACILE's HCAL reconstruction is ~10 % of the HLT) and the FACILE
module on the event's HCAL channels. Jobs run as Dask tasks (a LocalCluster, or any scheduler),
all against the one server. Throughput and latency are measured against the number of clients,
with dynamic batching on (``facile``) and off (``facile_nobatch``); the scaling model is fitted to
the time per event against clients per server.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.client.config import ClientConfig
from sonic.demos import projection
from sonic.demos.common import (
    NO_BATCHING_SUFFIX,
    EmulatedWork,
    calibrate,
    compare_outputs,
    plot,
    service,
    table,
)
from sonic.demos.console import Progress
from sonic.models.zoo.facile import make_inputs
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
from sonic.workflow.dask import DaskConfig, DaskRunner

MODEL = "facile"
REST_PER_FACILE = 9.0  # FACILE ~10 % of the HLT's time (seed 000: "10% reduction")


@dataclass(frozen=True)
class HltConfig:
    clients: tuple[int, ...] = (1, 2, 4, 8, 16)
    events_per_client: int = 12
    rechits: int = 4000  # HCAL channels per event; the seed ran 16,000 per request
    rest_s: float | None = None  # None: REST_PER_FACILE x FACILE's measured direct time
    dask: DaskConfig = field(default_factory=DaskConfig)


def make_event(rechits: int) -> Any:
    def make(index: int, rng: np.random.Generator) -> dict[str, Any]:
        del index
        return make_inputs(rechits, rng)

    return make


class Facile(SonicModule):
    def acquire(self, event: Event) -> Mapping[str, npt.NDArray[Any]]:
        return {"rechit_features": event.get("rechit_features")}

    def produce(self, event: Event, outputs: dict[str, npt.NDArray[Any]]) -> None:
        event.put("energy", outputs["energy"])
        event.put("hcal_energy_sum", float(outputs["energy"].sum()))


def _workflow(
    inference: Inference, model: str, rechits: int, work: CpuWork, rest_s: float, events: int, first: int
) -> tuple[Scheduler, SyntheticSource, OutputCollector]:
    collector = OutputCollector(["energy"])
    scheduler = Scheduler(
        [EmulatedWork("rest_of_hlt", work, rest_s), Facile(model, label="facile"), collector], inference
    )
    return scheduler, SyntheticSource(make_event(rechits), events, seed=0, first=first), collector


@dataclass(frozen=True)
class HltJob:
    """One HLT client job (a Dask task): picklable configuration, uses its worker's connection."""

    client: ClientConfig
    model: str
    rechits: int
    events: int
    rest_s: float
    work: CpuWork

    def __call__(self, index: int) -> dict[str, Any]:
        from sonic.workflow.dask_plugin import worker_inference  # noqa: PLC0415  (needs distributed)

        service = worker_inference(self.client)  # shared by this worker's jobs, closed by the worker
        service.infer(self.model, make_inputs(8, np.random.default_rng(0)))  # connect before timing
        scheduler, source, _ = _workflow(
            service, self.model, self.rechits, self.work, self.rest_s, self.events, index * self.events
        )
        started = time.time()
        report = scheduler.run(source)
        finished = time.time()
        latencies = [m.inference_s for e in report.events for m in e.modules if m.module == "facile"]
        return {
            "events": report.event_count,
            "run_started_unix_s": started,  # the event loop only, without connecting or warming up
            "run_finished_unix_s": finished,
            "wall_s": report.wall_s,
            "time_per_event_s": report.time_per_event_s,
            "latency_mean_s": statistics.fmean(latencies),
            "latency_p95_s": float(np.percentile(latencies, 95)),
        }


def _point(results: Sequence[dict[str, Any]]) -> dict[str, float]:
    start = min(r["run_started_unix_s"] for r in results)
    end = max(r["run_finished_unix_s"] for r in results)
    events = sum(r["events"] for r in results)
    return {
        "clients": len(results),
        "events_per_s": events / (end - start),
        "time_per_event_s": statistics.fmean(r["time_per_event_s"] for r in results),
        "latency_mean_s": statistics.fmean(r["latency_mean_s"] for r in results),
        "latency_p95_s": max(r["latency_p95_s"] for r in results),
        "workers": len({r["worker"] for r in results}),
    }


def _single(inference: Inference, model: str, config: HltConfig, work: CpuWork, rest_s: float) -> Any:
    scheduler, source, collector = _workflow(
        inference, model, config.rechits, work, rest_s, config.events_per_client, 0
    )
    report: RunReport = scheduler.run(source, server_models=[model])
    return report, collector.columns()


def run(config: HltConfig, repository: Path, server_address: str, out: Path, work: CpuWork) -> dict[str, Any]:
    print(f"\n== hlt: clients {list(config.clients)}, {config.events_per_client} events each, "
          f"{config.rechits} channels per event")  # fmt: skip
    with DirectInference([repository]) as direct:
        sample = make_inputs(config.rechits, np.random.default_rng(5))
        facile_s, rest_s = calibrate(
            lambda: direct.infer(MODEL, sample), configured_s=config.rest_s, per_ml=REST_PER_FACILE, repeats=5
        )
        print(f"FACILE on this CPU: {facile_s * 1e3:.2f} ms/event -> rest of HLT {rest_s * 1e3:.1f} ms/event")
        direct_report, reference = _single(direct, MODEL, config, work, rest_s)
    client = ClientConfig(servers=(server_address,))
    with service(server_address) as inference:
        service_report, outputs = _single(inference, MODEL, config, work, rest_s)
    same = compare_outputs(reference, outputs)
    sweep: dict[str, list[dict[str, float]]] = {}
    threads = math.ceil(max(config.clients) / config.dask.workers)
    dask_config = replace(config.dask, threads_per_worker=max(config.dask.threads_per_worker, threads))
    with DaskRunner(dask_config) as runner:
        for dynamic in (True, False):
            model = MODEL if dynamic else MODEL + NO_BATCHING_SUFFIX
            key = "dynamic_batching" if dynamic else "no_dynamic_batching"
            progress = Progress(f"hlt {key}", len(config.clients))
            sweep[key] = []
            for done, clients in enumerate(config.clients, start=1):
                job = HltJob(client, model, config.rechits, config.events_per_client, rest_s, work)
                sweep[key].append(_point(runner.run(job, clients).results))
                progress(done)
    rows = []
    for on, off in zip(sweep["dynamic_batching"], sweep["no_dynamic_batching"], strict=True):
        rows.append(
            [int(on["clients"]), on["events_per_s"], off["events_per_s"], on["events_per_s"] / off["events_per_s"],
             on["latency_mean_s"] * 1e3, off["latency_mean_s"] * 1e3, on["time_per_event_s"]]
        )  # fmt: skip
    print(
        table(
            ["clients", "ev/s dyn", "ev/s no-dyn", "gain", "lat ms dyn", "lat ms no-dyn", "s/event dyn"], rows
        )
    )
    fit_result: dict[str, Any]
    points = sweep["dynamic_batching"]
    try:
        fitted = scaling.fit([p["clients"] for p in points], [p["time_per_event_s"] for p in points])
        fit_result = {
            "ideal_s": fitted.ideal_s,
            "gpu_s": fitted.gpu_s,
            "rms_residual_s": fitted.rms_residual_s,
            "predicted_clients_per_server": fitted.saturation_ratio,
        }
        print(
            f"scaling model fit: t_ideal {fitted.ideal_s * 1e3:.1f} ms, t_server {fitted.gpu_s * 1e3:.1f} ms "
            f"-> {fitted.saturation_ratio:.1f} clients per server (seed 000: ~300 per V100 GPU)"
        )
    except ValueError as exc:
        fit_result = {"error": str(exc)}
        print(f"scaling model fit: {exc}")
    for name, report in (("direct", direct_report), ("service", service_report)):
        report.write_json(out / "hlt" / f"{name}.json")
    _plot(out / "hlt" / "throughput.png", sweep)
    per_event = {
        "direct_s": direct_report.time_per_event_s,
        "service_s": service_report.time_per_event_s,
        "server_compute_s": service_report.server[MODEL]["compute_s"],
    }
    print(f"one client: {per_event['direct_s'] * 1e3:.1f} ms/event direct, "
          f"{per_event['service_s'] * 1e3:.1f} ms/event service; same outputs: {same['identical']}")  # fmt: skip
    gpu = projection.hlt(per_event["service_s"], per_event["server_compute_s"])
    print(projection.describe(gpu))
    return {
        "config": {"clients": list(config.clients), "events_per_client": config.events_per_client,
                   "rechits": config.rechits, "facile_direct_s": facile_s, "rest_s": rest_s,
                   "dask_workers": dask_config.workers, "threads_per_worker": dask_config.threads_per_worker},
        "per_event": per_event,
        "sweep": sweep,
        "fit": fit_result,
        "gpu_projection": gpu,
        "identical": same["identical"],
    }  # fmt: skip


def _plot(path: Path, sweep: Mapping[str, list[dict[str, float]]]) -> None:
    def draw(axes: Any) -> None:
        for key, points in sweep.items():
            axes.plot([p["clients"] for p in points], [p["events_per_s"] for p in points], "o-", label=key)
        axes.set_xscale("log", base=2)
        axes.set_xlabel("concurrent clients (Dask tasks)")
        axes.set_ylabel("events per second (all clients)")
        axes.set_title("HLT with FACILE as a service (CPU only, no GPU)")
        axes.legend()

    plot(path, draw)


def quick(config: HltConfig) -> HltConfig:
    return replace(config, clients=(1, 2, 4), events_per_client=4, rechits=1000)
