"""``sonic cmstriton``: CMSSW's ``cmsTriton`` launcher, starting ``sonic serve`` instead of a container.

CMSSW's SonicTriton fallback runs ``cmsTriton [options] start|stop|check`` and reads the gRPC port
from its output (``CMS_TRITON_GRPC_PORT: N``). This takes the same options and verbs, so a site
points the fallback at ``sonic cmstriton`` and gets a local ``sonic serve`` with no container runtime:

- ``start``: ports ``P`` (HTTP), ``P+1`` (gRPC), ``P+2`` (metrics) from ``-P`` (``-1``: the first free
  range from 8000 up); a hidden working folder ``./.NAME`` (``-t``) holds the server's PID and log;
  waits up to ``-w`` seconds for the ready line, tries ``-r`` times; ``-p PID`` stops the server when
  that process ends (``-1``: this command's parent).
- ``stop``: stops the server recorded in the working folder (SIGTERM: it drains), then removes the
  folder (``-c`` keeps it; ``-v`` keeps the log in the current folder).
- ``check``: whether ``sonic serve`` can run here (with ``-g``: whether it sees a GPU).

Container options (``-d``, ``-i``, ``-s``, ``-C``) have no meaning here and are noticed.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from sonic.launch.process import LaunchError, start_process
from sonic.launch.serve import wait_for_ready_line

NPORTS = 3
VERBOSE_ARGS = ("--log-verbose=1", "--log-error=1", "--log-warning=1", "--log-info=1")
PID_FILE = "sonic-serve.pid"
STOP_TIMEOUT_S = 60.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("cmstriton", help="CMSSW's cmsTriton launcher, running sonic serve")
    add = parser.add_argument
    add("-c", dest="cleanup", action="store_false", help="don't clean up the working folder")
    add("-C", dest="compat", help="(container) compatibility drivers: no effect here")
    add("-D", dest="dry_run", action="store_true", help="dry run: print the server command")
    add("-d", dest="docker", action="store_true", help="(container) use Docker: no effect here")
    add("-f", dest="force", action="store_true", help="force reuse of an existing working folder")
    add("-g", dest="gpu", action="store_true", help="use the GPU (check: require one)")
    add("-i", dest="image", help="(container) image: no effect here")
    add("-I", dest="instances", type=int, default=0, help="model instances (copies -m models, edits configs)")
    add("-M", dest="repos", action="append", default=[], type=Path, help="model repository (repeatable)")
    add("-m", dest="models", action="append", default=[], type=Path, help="model folder (repeatable)")
    add("-n", dest="name", default="triton_server_instance", help="instance name (and working folder)")
    add("-P", dest="port", type=int, default=8000, help="base port (-1: first free range)")
    add("-p", dest="watch_pid", type=int, default=None, help="stop when this PID ends (-1: parent)")
    add("-r", dest="retries", type=int, default=3, help="start attempts")
    add("-s", dest="sandbox", help="(container) sandbox: no effect here")
    add("-t", dest="tmpdir", type=Path, default=None, help="working folder (default ./.NAME)")
    add("-v", dest="verbose", action="store_true", help="start: debug logs; stop: keep the log")
    add("-w", dest="wait_s", type=float, default=300.0, help="seconds to wait for the server")
    add(
        "operation",
        choices=["start", "stop", "check"],
        help="start a server, stop the one started, or check that this system can run one",
    )
    add("--after-pid", type=int, default=None, help=argparse.SUPPRESS)  # the -p watcher's stop
    parser.set_defaults(run=run)


def _workdir(args: argparse.Namespace) -> Path:
    return (args.tmpdir or Path.cwd() / f".{args.name}").resolve()


def _log_name(args: argparse.Namespace) -> str:
    return f"log_{args.name}.log"


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(base: int, auto: bool) -> int:
    """The first base port from ``base`` whose three ports are free; without ``auto``, ``base`` or none."""
    while not all(_port_free(base + i) for i in range(NPORTS)):
        if not auto:
            msg = "Error: requested port in use"
            raise LaunchError(msg)
        base += NPORTS
    return base


def _repositories(args: argparse.Namespace, workdir: Path) -> list[Path]:
    """``-M`` folders, the parents of ``-m`` models, or with ``-I`` a local copy with edited configs."""
    models = [m.parent if m.is_file() else m for m in args.models]
    if args.instances <= 0:
        return sorted({p.resolve() for p in [*args.repos, *(m.parent for m in models)]})
    local = workdir / "local_model_repo"
    for model in models:
        target = local / model.name
        shutil.copytree(model, target)
        config = target / "config.pbtxt"
        text = config.read_text(encoding="utf-8") if config.is_file() else ""
        # As cmsTriton: N CPU instances, one thread each for onnxruntime.
        text += f"\ninstance_group [ {{ count: {args.instances} kind: KIND_CPU }} ]\n"
        if "onnx" in text:
            for key in ("intra_op_thread_count", "inter_op_thread_count"):
                text += f'parameters {{ key: "{key}" value: {{ string_value: "1" }} }}\n'
        config.write_text(text, encoding="utf-8")
    return sorted({p.resolve() for p in args.repos} | {local})


def serve_command(repositories: list[Path], base: int, verbose: bool) -> list[str]:
    command = [sys.executable, "-m", "sonic.cli.main", "serve"]
    command += [f"--model-repository={r}" for r in repositories]
    command += [f"--http-port={base}", f"--grpc-port={base + 1}", f"--metrics-port={base + 2}"]
    return command + list(VERBOSE_ARGS if verbose else ())


def _start_server(args: argparse.Namespace, workdir: Path, repositories: list[Path]) -> int:
    """Start ``sonic serve``; returns its PID. Port clashes move an automatic range on without a retry."""
    auto, base, attempts = args.port == -1, 8000 if args.port == -1 else args.port, 0
    while True:
        base = _ports(base, auto)
        print(f"CMS_TRITON_GRPC_PORT: {base + 1}", flush=True)
        log_path = workdir / _log_name(args)
        command = serve_command(repositories, base, args.verbose)
        try:
            process, _ = start_process(
                command, log_path, lambda p: wait_for_ready_line(p, args.wait_s), read_stdout=True
            )
        except LaunchError as exc:
            if auto and "Address already in use" in log_path.read_text(encoding="utf-8", errors="replace"):
                base += NPORTS
                continue
            attempts += 1
            if attempts >= max(args.retries, 1):
                raise
            print(f"Retrying after server issue: {str(exc).splitlines()[0]}", flush=True)
            continue
        assert process.stdout is not None
        process.stdout.close()  # the server sends its output to the log from here on
        return process.pid  # left running on purpose: `stop` (or the -p watcher) ends it by PID


def _notice(args: argparse.Namespace) -> None:
    options = (
        ("-d", args.docker),
        ("-g", args.gpu),
        ("-i", args.image),
        ("-s", args.sandbox),
        ("-C", args.compat),
    )
    for option, value in options:
        if value:
            print(f"cmstriton: {option} has no effect: sonic serve runs without a container", file=sys.stderr)


def _spawn_watcher(args: argparse.Namespace, workdir: Path) -> None:
    """A detached ``cmstriton stop --after-pid`` that stops the server when the watched process ends."""
    pid = os.getppid() if args.watch_pid == -1 else args.watch_pid
    command = [sys.executable, "-m", "sonic.cli.main", "cmstriton", "-n", args.name, "-t", str(workdir)]
    command += [*(["-c"] if not args.cleanup else []), *(["-v"] if args.verbose else [])]
    command += ["--after-pid", str(pid), "stop"]
    with (workdir / f"log_stop_{args.name}.log").open("w") as log:
        subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def start(args: argparse.Namespace) -> int:
    workdir = _workdir(args)
    _notice(args)
    if args.force and workdir.exists():
        stop(args)
    elif workdir.exists():
        print("Error: this container may already exist (override with -f)")
        return 1
    if args.dry_run:
        base = 8000 if args.port == -1 else args.port
        repositories = sorted({p.resolve() for p in args.repos} | {m.resolve().parent for m in args.models})
        print(" ".join(serve_command(repositories, base, args.verbose)))
        return 0
    workdir.mkdir(parents=True)
    try:
        pid = _start_server(args, workdir, _repositories(args, workdir))
    except LaunchError as exc:
        print(f"Error from sonic serve: {exc}")
        if args.cleanup and not args.verbose:
            shutil.rmtree(workdir, ignore_errors=True)
        return 1
    (workdir / PID_FILE).write_text(f"{pid}\n", encoding="utf-8")
    if args.watch_pid is not None:
        _spawn_watcher(args, workdir)
    print("server is ready!", flush=True)
    return 0


def _wait_for_exit(pid: int, timeout_s: float | None) -> bool:
    """Block until process ``pid`` (not our child) ends; False on timeout. A pidfd: no polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(fd)


def _is_our_server(pid: int) -> bool:
    """The recorded PID is still a ``sonic serve`` (PIDs are reused once a process is gone)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"sonic.cli.main" in cmdline and b"serve" in cmdline


def stop(args: argparse.Namespace) -> int:
    workdir = _workdir(args)
    if args.after_pid is not None:
        _wait_for_exit(args.after_pid, None)
    if not workdir.is_dir():
        if args.force:
            return 0
        print(f"Error: attempt to stop unknown container {args.name}")
        return 1
    pid_file = workdir / PID_FILE
    pid = int(pid_file.read_text(encoding="utf-8")) if pid_file.is_file() else None
    if pid is not None and _is_our_server(pid):
        os.kill(pid, signal.SIGTERM)  # the server drains requests in flight, then exits
        if not _wait_for_exit(pid, STOP_TIMEOUT_S):
            os.kill(pid, signal.SIGKILL)
            _wait_for_exit(pid, None)
    log = workdir / _log_name(args)
    if args.verbose and log.is_file():
        shutil.copy(log, Path.cwd() / log.name)
    if args.cleanup:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def check(args: argparse.Namespace) -> int:
    from sonic.server.devices import detect_gpu_count  # noqa: PLC0415  (imports onnxruntime)

    if args.gpu and detect_gpu_count() == 0:
        print("sonic serve cannot use a GPU here: no NVIDIA GPU visible to onnxruntime-gpu")
        return 1
    print("sonic serve can run on this system")
    return 0


def run(args: argparse.Namespace) -> int:
    return {"start": start, "stop": stop, "check": check}[args.operation](args)
