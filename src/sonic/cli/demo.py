"""``sonic demo [protodune|hlt|miniaod|all]``: the seed demonstrators, direct vs service.

Builds the reference models if needed, starts ``sonic serve`` over them, runs each demonstrator
through :mod:`sonic.workflow` with direct (in-process) and service inference, prints tables while
it works, and ends with one summary table, the plots' paths and a single-page HTML report
(``OUT/report.html``); libraries' logs go to ``OUT/demo.log``. Exit status 1 if any service run's
outputs differ from the direct run's.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sonic.demos import hlt, miniaod, protodune, report
from sonic.demos.common import build_models, write_json
from sonic.demos.console import Progress, console, require_rich, rich_table, route_logs
from sonic.launch import ServerProcess
from sonic.workflow import CpuWork
from sonic.workflow.dask import DaskConfig

DEMOS = ("protodune", "hlt", "miniaod")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def _positive(text: str) -> int:
    """A count: 0 or less would fall back to the default silently (or fail deep in a demonstrator)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="the seed demonstrators (ProtoDUNE, HLT, MiniAOD), direct vs service"
    )
    parser.add_argument(
        "which", nargs="?", default="all", choices=[*DEMOS, "all"], help="which demonstrator to run"
    )
    parser.add_argument("--out", type=Path, default=Path("sonic-demo"), help="JSON, plots, model repository")
    parser.add_argument("--repository", type=Path, default=None, help="model repository (default OUT/models)")
    parser.add_argument("--quick", action="store_true", help="smallest sizes (seconds; what CI runs)")
    parser.add_argument(
        "--streams", type=_positive, default=None, help="event streams per job (protodune, miniaod)"
    )
    parser.add_argument(
        "--traffic-log",
        type=Path,
        default=None,
        metavar="DIR",
        help="the server records every request it sees (sonic serve --traffic-log DIR): "
        "replay with sonic perf --replay DIR, tune with sonic analyze --traffic DIR",
    )
    parser.add_argument(
        "--traffic-log-sample-contents-every",
        type=int,
        default=0,
        metavar="N",
        help="with --traffic-log: keep the input bytes of every N-th request (up to 1 MiB each), "
        "for sonic validate (0: never)",
    )
    group = parser.add_argument_group("protodune")
    group.add_argument("--events", type=_positive, default=None, help="events (default 4)")
    group.add_argument(
        "--patches", type=_positive, default=None, help="patches per event (seed: 55000; default 1500)"
    )
    group.add_argument(
        "--batch-sizes", type=_ints, default=None, help="patches per request (default 235,1693)"
    )
    group = parser.add_argument_group("hlt")
    group.add_argument(
        "--clients", type=_ints, default=None, help="client counts to sweep (default 1,2,4,8,16)"
    )
    group.add_argument(
        "--events-per-client", type=_positive, default=None, help="events per client job (default 12)"
    )
    group.add_argument(
        "--rechits", type=_positive, default=None, help="HCAL channels per event (default 4000)"
    )
    group.add_argument("--scheduler", default=None, help="Dask scheduler address (default: a LocalCluster)")
    group.add_argument("--dask-workers", type=_positive, default=2, help="LocalCluster worker processes")
    group = parser.add_argument_group("miniaod")
    group.add_argument("--miniaod-events", type=_positive, default=None, help="events (default 16)")
    parser.set_defaults(run=run)


def _configs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    pd, hl, mini = protodune.ProtoDuneConfig(), hlt.HltConfig(), miniaod.MiniAodConfig()
    if args.quick:
        pd, hl, mini = protodune.quick(pd), hlt.quick(hl), miniaod.quick(mini)
    pd = replace(
        pd,
        events=args.events or pd.events,
        patches=args.patches or pd.patches,
        streams=args.streams or pd.streams,
        batch_sizes=args.batch_sizes or pd.batch_sizes,
    )
    hl = replace(
        hl,
        clients=args.clients or hl.clients,
        events_per_client=args.events_per_client or hl.events_per_client,
        rechits=args.rechits or hl.rechits,
        dask=DaskConfig(scheduler_address=args.scheduler, workers=args.dask_workers),
    )
    mini = replace(mini, events=args.miniaod_events or mini.events, streams=args.streams or mini.streams)
    return pd, hl, mini


def run(args: argparse.Namespace) -> int:
    try:
        require_rich()  # the demo extra: said before any work, not after the models are built
    except ImportError as exc:
        print(f"sonic demo: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "demo.log"
    handler = route_logs(log_path)
    try:
        return _run(args, out, log_path)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def _run(args: argparse.Namespace, out: Path, log_path: Path) -> int:
    selected = DEMOS if args.which == "all" else (args.which,)
    repository = args.repository or out / "models"
    pd, hl, mini = _configs(args)
    names: list[str] = []
    no_batching: list[str] = []
    if "protodune" in selected:
        names.append(protodune.MODEL)
        no_batching.append(protodune.MODEL)
    if "hlt" in selected:
        names.append(hlt.MODEL)
        no_batching.append(hlt.MODEL)
    if "miniaod" in selected:
        names += miniaod.MODELS
    started = time.perf_counter()
    print(f"logs (server, Dask, libraries): {log_path}")
    print(f"building models in {repository} (reused when up to date): {', '.join(names)}")
    build_models(repository, names, no_batching=no_batching, progress=Progress("building models", len(names)))
    work = CpuWork.calibrate()
    print("no GPU here: the server runs the models on this machine's CPU")
    results: dict[str, Any] = {}
    # The trace is complete once the server has stopped (its last file is renamed at shutdown).
    traffic: tuple[str, ...] = ()
    if args.traffic_log is not None:
        every = str(args.traffic_log_sample_contents_every)
        traffic = ("--traffic-log", str(args.traffic_log), "--traffic-log-sample-contents-every", every)
    with ServerProcess.start([repository], extra_args=traffic, log_path=out / "server.log") as server:
        print(f"server ready at {server.grpc_address} (pid {server.pid})")
        if "protodune" in selected:
            results["protodune"] = protodune.run(pd, repository, server.grpc_address, out, work)
        if "hlt" in selected:
            results["hlt"] = hlt.run(hl, repository, server.grpc_address, out, work)
        if "miniaod" in selected:
            results["miniaod"] = miniaod.run(mini, repository, server.grpc_address, out, work)
    results["wall_s"] = time.perf_counter() - started
    write_json(out / "summary.json", results)
    page = report.write_html(out / "report.html", results, out, log_path)
    identical = all(results[name]["identical"] for name in selected)
    screen = console()
    screen.print()
    screen.print(
        rich_table("summary (seconds per event)", report.SUMMARY_HEADERS, report.summary_rows(results))
    )
    screen.print("GPU column: scaling-model projection, not a measurement (no GPU on this machine)")
    for path in report.plot_paths(out, results):
        screen.print(f"plot:   {path}")
    screen.print(f"report: {page.resolve()}  (one HTML file, plots inside; open it in a browser)")
    screen.print(f"data:   {out / 'summary.json'}; log: {log_path}")
    if args.traffic_log is not None:
        screen.print(
            f"traffic: {args.traffic_log} (sonic perf --replay, sonic analyze --traffic, sonic validate)"
        )
    verdict = "OK" if identical else "OUTPUTS DIFFER between direct and service"
    screen.print(f"demo: {verdict} ({results['wall_s']:.0f} s)")
    return 0 if identical else 1
