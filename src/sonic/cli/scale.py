"""``sonic scale``: seed 002's scaling model: fit it, predict the optimal clients per server, simulate.

sonic scale protodune                     # the seed's figures and where 68:1 comes from
sonic scale predict --cpu-s 117 --gpu-s 2.7 --latency-s 2.3
sonic scale fit measurements.csv          # columns clients, servers, time_per_event_s
sonic scale from-perf perf.json --cpu-s 0.9 --requests-per-event 3
sonic scale simulate --clients 2500 --servers 100 --cpu-s 0.9 --exec-fixed-s 0.02
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from sonic.perf.scaling import ScalingParams, fit, protodune_derivation, protodune_params
from sonic.perf.simulate import SimulationConfig, simulate


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("scale", help="processing-time scaling model: fit, predict, simulate")
    actions = parser.add_subparsers(dest="action", required=True)

    protodune = actions.add_parser("protodune", help="the ProtoDUNE figures of seed 002, and the 68:1 ratio")
    protodune.add_argument("--plot", type=Path, help="PNG of the model and a simulation on 4 GPUs")

    predict = actions.add_parser("predict", help="saturation point and time per event from given parameters")
    _add_params(predict)
    predict.add_argument("--servers", type=int, default=1, help="servers the clients share")
    predict.add_argument("--clients", type=int, action="append", default=[], help="also tabulate these")

    fitting = actions.add_parser("fit", help="fit t_ideal and t_GPU to measured times per event")
    fitting.add_argument("measurements", type=Path, help="CSV: clients, servers, time_per_event_s")
    fitting.add_argument("--latency-s", type=float, default=0.0, help="measured separately, to split t_ideal")
    fitting.add_argument("--plot", type=Path, help="PNG of measured against predicted")
    fitting.add_argument("--json", type=Path, help="write the fit here")

    from_perf = actions.add_parser("from-perf", help="parameters from a sonic perf JSON report")
    from_perf.add_argument("report", type=Path, help="the JSON a sonic perf --json run wrote")
    from_perf.add_argument(
        "--cpu-s", type=float, required=True, help="client CPU time per event, (1-p)·t_CPU"
    )
    from_perf.add_argument(
        "--requests-per-event", type=int, default=1, help="inference requests each event sends"
    )

    sim = actions.add_parser("simulate", help="discrete-event simulation of N clients on M servers")
    sim.add_argument("--clients", required=True, help="N or START:END:STEP")
    sim.add_argument("--servers", type=int, default=1, help="servers the clients share")
    sim.add_argument("--cpu-s", type=float, required=True, help="client CPU time per event, (1-p)·t_CPU")
    sim.add_argument("--exec-fixed-s", type=float, required=True, help="server time per execution")
    sim.add_argument("--exec-per-request-s", type=float, default=0.0, help="server time per merged request")
    sim.add_argument("--latency-s", type=float, default=0.0, help="wire time per event")
    sim.add_argument("--requests-per-event", type=int, default=1, help="inference requests each event sends")
    sim.add_argument("--max-batch-requests", type=int, default=1, help="dynamic batching: merge up to this")
    sim.add_argument("--instances", type=int, default=1, help="model instances per server")
    sim.add_argument("--events-per-client", type=int, default=20, help="events each simulated client runs")
    sim.add_argument(
        "--cpu-jitter", type=float, default=0.05, help="relative spread of the client CPU time per event"
    )
    parser.set_defaults(run=run)


def _add_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cpu-s", type=float, required=True, help="(1-p)·t_CPU per event")
    parser.add_argument("--gpu-s", type=float, required=True, help="t_GPU per event")
    parser.add_argument("--latency-s", type=float, default=0.0, help="t_latency per event")


def _print_params(params: ScalingParams, servers: int, clients: list[int]) -> None:
    print(
        f"(1-p)·t_CPU = {params.cpu_serial_s:g} s, t_GPU = {params.gpu_s:g} s, t_latency = {params.latency_s:g} s"
    )
    print(f"t_ideal = {params.ideal_s:g} s per event")
    ratio = params.saturation_ratio
    print(
        f"saturation: {ratio:.1f} clients per server (optimal ratio {ratio:.0f}:1; {ratio * servers:.0f} on {servers})"
    )
    for n in clients:
        print(
            f"  {n} clients: {params.time_per_event_s(n, servers):.4g} s per event, {params.events_per_s(n, servers):.4g} events/s"
        )


def _protodune(args: argparse.Namespace) -> int:
    d = protodune_derivation()
    print("ProtoDUNE (seed 002), seconds per event:")
    print(
        f"  CPU only: {d['cpu_only_s']:g}; SONIC: (1-p)·t_CPU = {d['cpu_serial_s']:g} (p = {d['p']:.3f}), "
        f"t_latency = {d['latency_s']:g}, t_ideal = {d['ideal_s']:g} ({d['speedup']:.2f}x faster)"
    )
    print(f"  with the listed t_GPU = 2.7 s: {d['ratio_with_listed_gpu_s']:.1f} clients per GPU")
    print(
        f"  measured knee, big batch: 270 processes / 4 GPUs = {d['measured_knee_ratio_big_batch']:.1f} -> 68:1"
    )
    print(
        f"  t_GPU that puts the model's knee there: {d['gpu_s_implied_by_knee']:.3f} s "
        f"-> {d['ratio_with_implied_gpu_s']:.1f}:1"
    )
    print(
        f"  small batch (2.6 s travel): t_ideal = {d['small_batch_ideal_s']:g}, {d['small_batch_ratio']:.1f} per GPU, "
        f"{d['small_batch_knee_processes_predicted']:.0f} processes on 4 GPUs (measured 190)"
    )
    if args.plot:
        from sonic.perf.plot import plot_scaling  # noqa: PLC0415  (matplotlib is optional)

        params = protodune_params(gpu_s=d["gpu_s_implied_by_knee"])
        clients = list(range(40, 420, 20))
        model = [params.time_per_event_s(n, 4) for n in clients]
        simulated = [
            simulate(
                SimulationConfig(
                    clients=n,
                    servers=4,
                    cpu_s=params.cpu_serial_s,
                    exec_fixed_s=params.gpu_s,
                    exec_per_request_s=0.0,
                    latency_s=params.latency_s,
                    events_per_client=8,
                    cpu_jitter=0.05,
                )
            ).time_per_event_s
            for n in clients
        ]
        ratios = [n / 4 for n in clients]
        plot_scaling(
            [],
            [],
            {"model": (ratios, model), "simulation": (ratios, simulated)},
            args.plot,
            title="ProtoDUNE on 4 GPUs, t_GPU = 1.79 s",
        )
        print(f"wrote {args.plot}")
    return 0


def _fit(args: argparse.Namespace) -> int:
    with args.measurements.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    try:
        ratios = [float(r["clients"]) / float(r["servers"]) for r in rows]
        times = [float(r["time_per_event_s"]) for r in rows]
    except (KeyError, ValueError) as exc:
        print(
            f"sonic scale fit: {args.measurements}: need columns clients, servers, time_per_event_s ({exc})",
            file=sys.stderr,
        )
        return 1
    result = fit(ratios, times)
    params = result.params(latency_s=args.latency_s)
    print(
        f"fit over {result.points} points: t_ideal = {result.ideal_s:.4g} s, t_GPU = {result.gpu_s:.4g} s, "
        f"rms residual {result.rms_residual_s:.3g} s"
    )
    print(
        f"saturation at {result.saturation_ratio:.1f} clients per server: optimal ratio {result.saturation_ratio:.0f}:1"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "ideal_s": result.ideal_s,
                    "gpu_s": result.gpu_s,
                    "cpu_serial_s": params.cpu_serial_s,
                    "latency_s": params.latency_s,
                    "saturation_ratio": result.saturation_ratio,
                    "rms_residual_s": result.rms_residual_s,
                    "points": [list(p) for p in zip(ratios, times, strict=True)],
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    if args.plot:
        from sonic.perf.plot import plot_scaling  # noqa: PLC0415

        grid = [max(ratios) * i / 100 for i in range(1, 121)]
        plot_scaling(
            ratios,
            times,
            {"fitted model": (grid, result.predict(grid))},
            args.plot,
            title="time per event: measured and fitted",
        )
    return 0


def _from_perf(args: argparse.Namespace) -> int:
    report = json.loads(args.report.read_text(encoding="utf-8"))
    results = report["results"]
    peak = max(results, key=lambda r: r["requests_per_s"])
    lightest = min(results, key=lambda r: r["concurrency"] or r["request_rate_per_s"])
    gpu_s = args.requests_per_event / peak["requests_per_s"]
    wire_us = lightest["client_wire_us"] or 0.0
    params = ScalingParams(
        cpu_serial_s=args.cpu_s, gpu_s=gpu_s, latency_s=args.requests_per_event * wire_us / 1e6
    )
    print(
        f"from {args.report}: peak {peak['requests_per_s']:.1f} req/s -> t_GPU = {gpu_s:.4g} s per event "
        f"({args.requests_per_event} requests); wire time {wire_us:.0f} us per request"
    )
    _print_params(params, 1, [])
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from sonic.perf.ranges import parse_range  # noqa: PLC0415

    print("clients servers  time/event s  model s  events/s  utilization  mean batch")
    for clients in parse_range(args.clients):
        config = SimulationConfig(
            clients=int(clients),
            servers=args.servers,
            cpu_s=args.cpu_s,
            exec_fixed_s=args.exec_fixed_s,
            exec_per_request_s=args.exec_per_request_s,
            latency_s=args.latency_s,
            requests_per_event=args.requests_per_event,
            max_batch_requests=args.max_batch_requests,
            instances=args.instances,
            events_per_client=args.events_per_client,
            cpu_jitter=args.cpu_jitter,
        )
        result = simulate(config)
        gpu_s = args.requests_per_event * (args.exec_fixed_s + args.exec_per_request_s) / args.instances
        model = ScalingParams(args.cpu_s, gpu_s, args.latency_s).time_per_event_s(clients, args.servers)
        print(
            f"{int(clients):7d} {args.servers:7d} {result.time_per_event_s:13.4g} {model:8.4g} "
            f"{result.events_per_s:9.4g} {result.server_utilization:12.3f} {result.mean_batch_requests:11.2f}"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    actions = {"protodune": _protodune, "fit": _fit, "from-perf": _from_perf, "simulate": _simulate}
    try:
        if args.action == "predict":
            _print_params(ScalingParams(args.cpu_s, args.gpu_s, args.latency_s), args.servers, args.clients)
            return 0
        return actions[args.action](args)
    except (ValueError, OSError, KeyError) as exc:
        print(f"sonic scale {args.action}: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(f"sonic scale: {exc}", file=sys.stderr)
        return 2
