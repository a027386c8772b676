"""Issue 26 on the seed demonstrators: record `sonic demo hlt` and `sonic demo protodune`, replay, tune.

Per demo: (1) `sonic demo WHICH --traffic-log DIR` runs as a user runs it (its own process, its own
server) and leaves the trace; (2) `sonic analyze --traffic` (its engine, :mod:`sonic.perf.analyze_traffic`)
replays the trace of the demo's batching model against the demo's own configuration (the "current" one)
and each distinct candidate in paired rounds, the order reversed every other round, and decides
(:mod:`sonic.perf.decide`): a candidate is recommended only if it beats the demo's configuration beyond
the spread of the rounds. Its rounds are the measured effect under replay: per candidate the paired p99
ratios (candidate / demo's, per round), their median and spread. This is done at the recorded rate (x1)
and time-scaled (xK): the demos send far less than one server takes, and the seeds' point is many jobs
per server. K is the scale that brings the trace's server utilisation (its share of each execution's
compute, summed over the recorded span: :func:`sonic.perf.analyze_traffic.server_load`) to
``--target-utilisation`` (default 0.8); a trace already at or above it is analysed at x1 only.

    .venv/bin/python -m benchmarks.traffic_demos [--rounds 3] [--reuse] [--which hlt] [--scales 1,K]

Figures: benchmarks/results/traffic_demos.json; the demos' own output under --out (default
/tmp/sonic-traffic-demos). ``--reuse`` keeps traces already recorded there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.report import save
from sonic.perf.analyze import SearchSpace
from sonic.perf.analyze_traffic import (
    TrafficAnalysis,
    TrafficAnalyzeConfig,
    run_traffic_analysis,
    server_load,
)
from sonic.traffic.schema import read_traffic


@dataclass(frozen=True)
class Demo:
    which: str
    model: str  # the demo's model with dynamic batching: the configuration it ships
    demo_args: tuple[str, ...]
    space: SearchSpace  # at the recorded rate: kept small, each replay lasting the whole recorded span
    scaled_space: SearchSpace  # time-scaled: replays are short, the whole space
    jobs_recorded: int  # client jobs behind the trace, for the scaling model (0: mixed, not fitted)


DEMOS = (
    Demo(
        "hlt",
        "facile",
        ("--clients", "1,2,4,8,16", "--events-per-client", "12"),
        SearchSpace(
            instance_counts=(1, 2),
            max_batch_sizes=(65536,),
            dynamic_batching=(False, True),
            max_queue_delays_us=(2000,),
        ),
        SearchSpace(
            instance_counts=(1, 2),
            max_batch_sizes=(65536,),
            dynamic_batching=(False, True),
            max_queue_delays_us=(0, 2000),
        ),
        0,
    ),
    Demo(
        "protodune",
        "emtrk_michel",
        ("--events", "4"),
        SearchSpace(
            instance_counts=(1, 2),
            max_batch_sizes=(2048,),
            dynamic_batching=(True,),
            max_queue_delays_us=(0, 20000),
        ),
        SearchSpace(
            instance_counts=(1, 2),
            max_batch_sizes=(2048,),
            dynamic_batching=(False, True),
            max_queue_delays_us=(0, 20000),
        ),
        1,
    ),
)


def record(demo: Demo, out: Path, repository: Path, reuse: bool) -> tuple[Path, float]:
    traffic = out / demo.which / "traffic"
    if reuse and read_traffic(traffic, (demo.model,)).num_rows:
        return traffic, 0.0
    shutil.rmtree(traffic, ignore_errors=True)
    command = [sys.executable, "-m", "sonic.cli.main", "demo", demo.which, "--out", str(out / demo.which)]
    command += ["--repository", str(repository), "--traffic-log", str(traffic), *demo.demo_args]
    print("$", " ".join(command), flush=True)
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return traffic, time.monotonic() - started


def recorded_p99_ms(traffic: Path, model: str) -> float:
    totals = sorted(int(row["total_us"]) for row in read_traffic(traffic, (model,)).to_pylist())
    return totals[min(len(totals) - 1, int(0.99 * len(totals)))] / 1000


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def analysis_figures(analysis: TrafficAnalysis) -> dict[str, Any]:
    """Per configuration its rounds; per candidate its paired ratios to the demo's configuration."""
    configurations = {}
    for trial in (analysis.current, *analysis.candidates):
        rounds = [r for r in trial.rounds if r.p99_ms is not None]
        configurations[trial.name] = {
            "rounds_p99_ms": [r.p99_ms for r in trial.rounds],
            "rounds_mean_ms": [r.mean_ms for r in trial.rounds],
            "failed": trial.failed,
            "error": trial.error,
            **({"p99_ms": spread([r.p99_ms or 0.0 for r in rounds])} if rounds else {}),
            **({"fidelity": spread([r.fidelity for r in rounds])} if rounds else {}),
        }
    verdicts = [asdict(v) for v in analysis.decision.verdicts]
    chosen = analysis.recommended
    return {
        "configurations": configurations,
        "verdicts": verdicts,
        "recommended": chosen.name if chosen else None,
        "recommended_config": chosen.config_text if chosen else None,
        "elapsed_s": analysis.elapsed_s,
    }


def scale_for(utilisation: float, target: float) -> float:
    """The time scale that brings the trace's server utilisation to ``target`` (1: already there)."""
    return max(1.0, round(target / utilisation)) if utilisation > 0 else 1.0


def run_demo(demo: Demo, args: argparse.Namespace, repository: Path) -> dict[str, Any]:
    print(f"\n== {demo.which}: record", flush=True)
    traffic, record_s = record(demo, args.out, repository, args.reuse)
    recorded_p99 = recorded_p99_ms(traffic, demo.model)
    slo = args.slo_factor * recorded_p99
    load = server_load(read_traffic(traffic, (demo.model,)).to_pylist())
    scaled = scale_for(load.utilisation, args.target_utilisation)
    scales = args.scales or ([1.0, scaled] if scaled > 1 else [1.0])
    result: dict[str, Any] = {
        "model": demo.model,
        "demo_args": list(demo.demo_args),
        "record_s": record_s,
        "recorded_requests": load.requests,
        "recorded_server_p99_ms": recorded_p99,
        "slo_p99_ms": slo,
        "rounds": args.rounds,
        "scaling": {"utilisation": load.utilisation, "server_s": load.server_s, "wall_s": load.wall_s},
        "scale_for_target_utilisation": scaled,
        "analyses": {},
    }
    if demo.jobs_recorded:
        result["scaling"]["jobs_per_server"] = load.jobs_per_server(demo.jobs_recorded)
    for scale in scales:
        space = demo.space if scale == 1 else demo.scaled_space
        print(
            f"== {demo.which} x{scale:g}: analyze {demo.model} in {args.rounds} paired rounds "
            f"(SLO p99 {slo:.1f} ms = {args.slo_factor:g} x recorded {recorded_p99:.1f} ms; "
            f"utilisation at x1 {load.utilisation:.3f}, load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
        analysis = run_traffic_analysis(
            TrafficAnalyzeConfig(
                repository,
                demo.model,
                traffic,
                slo,
                space,
                time_scale=scale,
                repeats=args.rounds,
                time_budget_s=args.time_budget_s,
            ),
            progress=lambda line: print(f"  {line} (load {os.getloadavg()[0]:.1f})", flush=True),
        )
        figures = analysis_figures(analysis)
        result["analyses"][f"x{scale:g}"] = {"time_scale": scale, **figures}
        current = figures["configurations"]["current"]
        print(f"  demo's configuration: p99 per round {current['rounds_p99_ms']}")
        for verdict in analysis.decision.verdicts:
            ratios = ", ".join(f"{r:.2f}" for r in verdict.ratios)
            print(
                f"  {verdict.name}: ratios [{ratios}] median {verdict.median_ratio} ±{verdict.spread}: {verdict.why}"
            )
        for trial in analysis.candidates:
            if not trial.rounds:
                print(f"  {trial.name}: {trial.error}")
        print(f"  => {figures['recommended'] or 'keep the current configuration'}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds per analysis")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "sonic-traffic-demos")
    parser.add_argument("--repository", type=Path, default=None, help="demo models (default OUT/models)")
    parser.add_argument("--which", choices=[d.which for d in DEMOS], action="append", default=None)
    parser.add_argument("--slo-factor", type=float, default=2.0, help="SLO: this x the recorded server p99")
    parser.add_argument("--reuse", action="store_true", help="keep traces already recorded under --out")
    parser.add_argument(
        "--target-utilisation", type=float, default=0.8, help="the scaled replay's server utilisation"
    )
    parser.add_argument(
        "--scales",
        type=lambda text: [float(x) for x in text.split(",")],
        default=None,
        help="time scales to analyse at (default: 1 and the one reaching --target-utilisation)",
    )
    parser.add_argument("--time-budget-s", type=float, default=1800.0, help="per analysis")
    parser.add_argument("--tag", default="", help="results go to results/traffic_demos-TAG.json")
    args = parser.parse_args()
    repository = args.repository or args.out / "models"
    results: dict[str, Any] = {"load_average_start": os.getloadavg()}
    for demo in DEMOS:
        if args.which is None or demo.which in args.which:
            results[demo.which] = run_demo(demo, args, repository)
    results["load_average_end"] = os.getloadavg()
    results["args"] = {key: str(value) for key, value in vars(args).items()}
    print(f"saved {save('traffic_demos' + (f'-{args.tag}' if args.tag else ''), results)}")


if __name__ == "__main__":
    main()
