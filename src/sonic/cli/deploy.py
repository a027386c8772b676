"""``sonic deploy``: ``local`` runs replicas + Envoy (+ Prometheus) on this host until SIGTERM;
``render`` writes the generated Kubernetes files (Envoy, Prometheus, KEDA, Grafana) from the same source."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType


class StartInterrupted(BaseException):
    """SIGTERM or SIGINT while the stack starts."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("deploy", help="scale-out deployment: Envoy, Prometheus, Kubernetes")
    commands = parser.add_subparsers(dest="deploy_command", required=True)

    local = commands.add_parser("local", help="run N replicas behind a real Envoy on this host")
    local.add_argument(
        "--model-repository",
        action="append",
        required=True,
        type=Path,
        help="every replica serves it; repeatable",
    )
    local.add_argument("--replicas", type=int, default=2, help="sonic serve processes behind Envoy")
    local.add_argument("--host", default="127.0.0.1", help="address of every process (default: loopback)")
    local.add_argument("--port", type=int, default=8001, help="Envoy's gRPC port (0: a free one)")
    local.add_argument("--envoy-concurrency", type=int, default=2, help="Envoy worker threads")
    local.add_argument("--prometheus", action="store_true", help="also run Prometheus scraping everything")
    local.add_argument("--prometheus-port", type=int, default=9090, help="0: a free one")
    local.add_argument("--prometheus-binary", type=Path, help="default: $SONIC_PROMETHEUS, then PATH")
    local.add_argument(
        "--scrape-interval", default="5s", help="Prometheus scrape interval (with --prometheus)"
    )
    local.add_argument("--load-window", default="30s", help="rate() window of the load metric")
    local.add_argument(
        "--admission-threshold-ms",
        type=float,
        help="refuse new jobs' RepositoryIndex while queue time per execution is above this (needs --prometheus)",
    )
    local.add_argument(
        "--serve-arg", action="append", default=[], help="argument for every `sonic serve` (repeatable)"
    )
    local.add_argument("--workdir", type=Path, help="configs, logs and Prometheus data (default: a temp dir)")
    local.add_argument(
        "--ready-timeout-s",
        type=float,
        default=600.0,
        help="give up on a starting replica that prints no log line (one per model loaded) for this long; "
        "0: wait as long as it runs (default 600)",
    )
    local.set_defaults(run=run_local)

    render = commands.add_parser("render", help="write the generated Kubernetes files")
    render.add_argument(
        "--out",
        type=Path,
        default=Path("deploy/kubernetes"),
        help="folder the kustomize base and overlays go to",
    )
    render.set_defaults(run=run_render)


def run_local(args: argparse.Namespace) -> int:
    # Only this command needs the deploy extra (PyYAML, Envoy): `sonic serve` must start without it.
    from sonic.deploy.binaries import MissingBinaryError  # noqa: PLC0415
    from sonic.deploy.local import LocalSettings, LocalStack  # noqa: PLC0415
    from sonic.deploy.process import ChildStartError  # noqa: PLC0415

    try:
        settings = LocalSettings(
            repositories=tuple(args.model_repository),
            replicas=args.replicas,
            host=args.host,
            envoy_port=args.port,
            envoy_concurrency=args.envoy_concurrency,
            prometheus=args.prometheus,
            prometheus_port=args.prometheus_port,
            prometheus_binary=args.prometheus_binary,
            scrape_interval=args.scrape_interval,
            load_window=args.load_window,
            admission_threshold_ms=args.admission_threshold_ms,
            serve_args=tuple(args.serve_arg),
            workdir=args.workdir,
            ready_timeout_s=args.ready_timeout_s,
        )
    except ValueError as exc:
        print(f"sonic deploy local: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    starting = True

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal starting
        stop.set()
        if starting:  # replicas may load for minutes: stop now (LocalStack.start ends what it started)
            starting = False  # a second signal must not interrupt that cleanup
            raise StartInterrupted(signal.Signals(signum).name)

    def report(message: str) -> None:
        # Progress while replicas load (minutes for a large repository) and replicas restarted later.
        print(f"sonic deploy local: {message}", file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    report(f"starting {settings.replicas} replica(s) of sonic serve, then Envoy")
    stack = None
    try:
        stack = LocalStack.start(settings, report)
        starting = False
    except (ChildStartError, MissingBinaryError) as exc:
        print(f"sonic deploy local: {exc}", file=sys.stderr)
        return 1
    except StartInterrupted as exc:
        if stack is not None:  # the signal came between the start's end and `starting = False`
            stack.stop()
        print(f"sonic deploy local: {exc} while starting: everything started was stopped", file=sys.stderr)
        return 1
    with stack:
        print(stack.ready_line(), flush=True)
        print(f"sonic: configs and logs in {stack.workdir}", file=sys.stderr, flush=True)
        stop.wait()
    return 0


def run_render(args: argparse.Namespace) -> int:
    from sonic.deploy.kubernetes import write_generated  # noqa: PLC0415  (only this command needs it)

    for path in write_generated(args.out):
        print(path)
    return 0
