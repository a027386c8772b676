"""Issue 26 on the seed demonstrators: record `sonic demo hlt` and `sonic demo protodune`, replay, tune.

Per demo: (1) `sonic demo WHICH --traffic-log DIR` runs as a user runs it (its own process, its own
server) and leaves the trace; (2) `sonic analyze --traffic` (its engine, :mod:`sonic.perf.analyze_traffic`)
replays the trace of the demo's batching model against the demo's own configuration and each candidate
and recommends one; (3) the demo's configuration and the recommended one are replayed in turn, the order
reversed every other round, and the script prints per configuration the medians and spreads of p99 and
mean latency, the paired per-round ratio, and the replay's fidelity (requests sent per second against
requests recorded per second). The machine's other work shows in the spread: read the rounds, not one.

    .venv/bin/python -m benchmarks.traffic_demos [--rounds 5] [--analyze-repeats 1] [--reuse]

Figures: benchmarks/results/traffic_demos.json; the demos' own output under --out (default
/tmp/sonic-traffic-demos). ``--reuse`` keeps traces already recorded there.
"""

from __future__ import annotations

import argparse
import asyncio
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

from google.protobuf import text_format

from benchmarks.common import save
from sonic.launch import ServerProcess
from sonic.perf.analyze import CANDIDATE_SERVER_ARGS, SearchSpace, write_candidate_repository
from sonic.perf.analyze_traffic import TrafficAnalyzeConfig, run_traffic_analysis
from sonic.perf.replay import ReplayConfig, ReplayReport, replay
from sonic.protocol.model_config import CONFIG_FILENAME, load_config_file
from sonic.traffic.schema import read_traffic


@dataclass(frozen=True)
class Demo:
    which: str
    model: str  # the demo's model with dynamic batching: the configuration it ships
    demo_args: tuple[str, ...]
    space: SearchSpace
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


def replay_once(root: Path, traffic: Path, model: str) -> ReplayReport:
    with ServerProcess.start([root], extra_args=CANDIDATE_SERVER_ARGS) as server:
        return asyncio.run(replay(ReplayConfig(traffic, server.grpc_address, models=(model,))))


def figures(report: ReplayReport, model: str) -> dict[str, Any]:
    result = report.models[model]
    latency = result.latency
    server = result.server
    return {
        "p99_ms": latency.p99_us / 1000,
        "mean_ms": latency.mean_us / 1000,
        "failed": result.failed,
        "fidelity": report.fidelity,
        "late": report.late,
        "recorded_per_s": report.recorded_per_s,
        "sent_per_s": report.sent_per_s,
        "server_batch": server.inferences / server.executions if server and server.executions else 0.0,
        "server_queue_us": server.queue_us if server else 0.0,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(
    demo: Demo, repository: Path, traffic: Path, recommended_text: str, rounds: int
) -> dict[str, Any]:
    model_dir = repository / demo.model
    current = load_config_file(model_dir / CONFIG_FILENAME)
    recommended = load_config_file(model_dir / CONFIG_FILENAME)
    recommended.Clear()
    text_format.Parse(recommended_text, recommended)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-traffic-demos-") as tmp:
        roots = {
            "demo": write_candidate_repository(model_dir, Path(tmp) / "demo", current),
            "recommended": write_candidate_repository(model_dir, Path(tmp) / "recommended", recommended),
        }
        for round_index in range(rounds):
            names = list(roots) if round_index % 2 == 0 else list(roots)[::-1]
            for name in names:
                row = {
                    "round": round_index,
                    "config": name,
                    **figures(replay_once(roots[name], traffic, demo.model), demo.model),
                }
                rows.append(row)
                print(
                    f"  round {round_index} {name:11s} p99 {row['p99_ms']:8.2f} ms  mean {row['mean_ms']:8.2f} ms  "
                    f"failed {row['failed']}  fidelity {row['fidelity']:.3f}  batch {row['server_batch']:.0f}  "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    summary: dict[str, Any] = {}
    for name in ("demo", "recommended"):
        mine = [r for r in rows if r["config"] == name]
        for key in ("p99_ms", "mean_ms", "fidelity", "server_batch"):
            summary[f"{name} {key}"] = spread([float(r[key]) for r in mine])
    for key in ("p99_ms", "mean_ms"):
        ratios = []
        for round_index in range(rounds):
            pair = {r["config"]: r[key] for r in rows if r["round"] == round_index}
            ratios.append(pair["recommended"] / pair["demo"] if pair["demo"] else 0.0)
        summary[f"recommended/demo {key}"] = {"rounds": [round(x, 3) for x in ratios], **spread(ratios)}
    return {"rows": rows, "summary": summary}


def rates(report_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Recorded against replayed requests per second, over every replay of the comparison."""
    recorded = report_rows[0]["recorded_per_s"]
    seconds = len(recorded)
    mean_recorded = sum(recorded) / max(1, seconds)
    sent_means = [sum(r["sent_per_s"]) / max(1, len(r["sent_per_s"])) for r in report_rows]
    return {
        "recorded_seconds": seconds,
        "recorded_mean_per_s": mean_recorded,
        "recorded_peak_per_s": max(recorded, default=0),
        "replayed_mean_per_s": spread(sent_means),
        "replayed_peak_per_s": spread([float(max(r["sent_per_s"], default=0)) for r in report_rows]),
        "fidelity": spread([r["fidelity"] for r in report_rows]),
        "late": spread([float(r["late"]) for r in report_rows]),
        "recorded_per_s": recorded,
        "first_replay_sent_per_s": report_rows[0]["sent_per_s"],
    }


def run_demo(demo: Demo, args: argparse.Namespace, repository: Path) -> dict[str, Any]:
    print(f"\n== {demo.which}: record", flush=True)
    traffic, record_s = record(demo, args.out, repository, args.reuse)
    recorded_p99 = recorded_p99_ms(traffic, demo.model)
    slo = args.slo_factor * recorded_p99
    print(
        f"== {demo.which}: analyze {demo.model} (SLO p99 {slo:.1f} ms = {args.slo_factor:g} x recorded {recorded_p99:.1f} ms)"
    )
    analysis = run_traffic_analysis(
        TrafficAnalyzeConfig(repository, demo.model, traffic, slo, demo.space, repeats=args.analyze_repeats),
        progress=lambda line: print("  " + line, flush=True),
    )
    trials = [asdict(t) for t in (analysis.current, *analysis.candidates)]
    for trial in trials:
        print(
            f"  {trial['name']:40s} p99 {trial['p99_ms'] or 0:8.2f} ms failed {trial['failed']} {trial['error']}"
        )
    chosen = analysis.recommended
    load = analysis.load
    result: dict[str, Any] = {
        "model": demo.model,
        "demo_args": list(demo.demo_args),
        "record_s": record_s,
        "recorded_requests": load.requests,
        "recorded_server_p99_ms": recorded_p99,
        "slo_p99_ms": slo,
        "analyze_repeats": args.analyze_repeats,
        "analysis": {"trials": trials, "recommended": chosen.name if chosen else None},
        "scaling": {"utilisation": load.utilisation, "server_s": load.server_s, "wall_s": load.wall_s},
    }
    if demo.jobs_recorded:
        result["scaling"]["jobs_per_server"] = load.jobs_per_server(demo.jobs_recorded)
    if chosen is None or chosen.name == "current":
        print(f"== {demo.which}: the demo's own configuration is the recommendation; nothing to compare")
        return result
    print(f"== {demo.which}: {args.rounds} rounds, demo's configuration against {chosen.name}", flush=True)
    comparison = compare(demo, repository, traffic, chosen.config_text, args.rounds)
    result["comparison"] = comparison
    result["rates"] = rates(comparison["rows"])
    for key, value in comparison["summary"].items():
        print(f"  {key}: {value}")
    print(
        f"  rates: { {k: v for k, v in result['rates'].items() if not k.endswith('per_s') or 'mean' in k or 'peak' in k} }"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "sonic-traffic-demos")
    parser.add_argument("--repository", type=Path, default=None, help="demo models (default OUT/models)")
    parser.add_argument("--which", choices=[d.which for d in DEMOS], action="append", default=None)
    parser.add_argument("--slo-factor", type=float, default=2.0, help="SLO: this x the recorded server p99")
    parser.add_argument("--reuse", action="store_true", help="keep traces already recorded under --out")
    parser.add_argument(
        "--analyze-repeats", type=int, default=1, help="sonic analyze --repeats: replays per candidate"
    )
    args = parser.parse_args()
    repository = args.repository or args.out / "models"
    results: dict[str, Any] = {"load_average_start": os.getloadavg()}
    for demo in DEMOS:
        if args.which is None or demo.which in args.which:
            results[demo.which] = run_demo(demo, args, repository)
    results["load_average_end"] = os.getloadavg()
    print(f"saved {save('traffic_demos', results)}")


if __name__ == "__main__":
    main()
