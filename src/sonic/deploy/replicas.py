"""The ``sonic serve`` replicas of ``sonic deploy local``: started, followed, watched, restarted.

Each replica's output is read line by line as it comes (:class:`sonic.deploy.process.LoggedChild`):
every model it loads is reported at once, and a replica is given up only when it prints nothing
for ``ready_timeout_s`` (a repository of many slow models takes as long as it takes).

Once all are ready, one thread per replica waits for its exit. A replica that dies while the
deployment runs (SIGKILL, out of memory, a crash) is reported, whatever it left in its process
group is killed, and it is started again on the same gRPC and metrics ports, so Envoy's static
endpoints and Prometheus's targets stay right; until it is ready again, Envoy's outlier detection
and health checks keep requests away from it. A replica that cannot start again is reported and
left down (the others keep serving); ``stop()`` ends every process, restarted ones included.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sonic.deploy.process import ChildStartError, LoggedChild
from sonic.launch.serve import READY_PATTERN

LOADED = re.compile(r"model (?P<name>\S+) loaded, versions")
FAILED = re.compile(r"model (?P<name>\S+) failed to load")
REPLICA_STOP_S = 60.0  # a replica drains its requests in flight on SIGTERM; SIGKILL after this
# A replica still loading has nothing to drain, and a model's load (a thread Python cannot
# interrupt) may keep it from exiting on SIGTERM: SIGKILL after this.
STARTING_STOP_S = 5.0

Report = Callable[[str], None]


@dataclass(frozen=True)
class ReplicaSpec:
    repositories: tuple[Path, ...]
    host: str
    serve_args: tuple[str, ...]
    workdir: Path
    ready_timeout_s: float  # longest silence of a starting replica; 0: none


class Replica:
    """One ``sonic serve`` process; ``grpc_port``/``metrics_port`` 0: free ones."""

    def __init__(
        self, index: int, spec: ReplicaSpec, report: Report, grpc_port: int = 0, metrics_port: int = 0
    ):
        self.index = index
        self._report = report
        self.models_loaded = 0
        command = [sys.executable, "-m", "sonic.cli.main", "serve", "--host", spec.host]
        command += ["--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)]
        for repository in spec.repositories:
            command += ["--model-repository", str(repository)]
        command += spec.serve_args
        self._timeout_s = spec.ready_timeout_s
        log_path = spec.workdir / f"replica-{index}.log"
        self.child = LoggedChild(
            f"replica {index}", command, log_path, READY_PATTERN, self._line, STARTING_STOP_S
        )
        self._report(f"replica {index}: started (pid {self.pid}), loading models")

    def _line(self, line: str) -> None:
        if match := LOADED.search(line):
            self.models_loaded += 1  # only the copier thread writes it
            self._report(f"replica {self.index}: model {match['name']} loaded ({self.models_loaded} so far)")
        elif match := FAILED.search(line):
            self._report(f"replica {self.index}: model {match['name']} FAILED to load (see its log)")

    def wait_ready(self) -> None:
        self.child.wait_ready(self._timeout_s, while_printing=True)
        fields = READY_PATTERN.match(self.child.ready_line)
        assert fields is not None  # the line matched it already
        self.addresses = dict(f.split("=", 1) for f in fields["fields"].split())
        self._report(f"replica {self.index}: ready, {self.models_loaded} models, grpc={self.grpc_address}")

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def process(self) -> subprocess.Popen[str]:
        return self.child.process

    @property
    def grpc_address(self) -> str:
        return self.addresses["grpc"]

    @property
    def metrics_address(self) -> str:
        return self.addresses["metrics"]

    def stop(self) -> int:
        return self.child.stop(REPLICA_STOP_S if self.child.ready_line else STARTING_STOP_S)


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _exit_reason(code: int) -> str:
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


class ReplicaSet:
    """N replicas kept running: started together, each restarted when it dies, all stopped by PID."""

    def __init__(self, spec: ReplicaSpec, count: int, report: Report) -> None:
        self.spec = spec
        self._report = report
        self._lock = threading.Lock()
        self._stopping = False
        self.restarts = 0
        self._current: list[Replica] = []
        self._watchers: list[threading.Thread] = []
        self._count = count
        self.addresses: list[str] = []  # gRPC, per replica index: kept by restarts
        self.metrics_addresses: list[str] = []

    def start(self) -> None:
        """All replicas at once (they load in parallel); returns when every one is ready."""
        for index in range(self._count):
            replica = Replica(index, self.spec, self._report)
            with self._lock:  # one by one: if a later one cannot even be spawned, stop() ends these
                self._current.append(replica)
        for replica in self._current:
            replica.wait_ready()  # raises for the first that fails; stop() ends the others
        self.addresses = [r.grpc_address for r in self._current]
        self.metrics_addresses = [r.metrics_address for r in self._current]
        self._watchers = [
            threading.Thread(target=self._watch, args=(i,), name=f"replica-{i}-watch")
            for i in range(self._count)
        ]
        for watcher in self._watchers:
            watcher.start()

    @property
    def replicas(self) -> list[Replica]:
        with self._lock:
            return list(self._current)

    def _watch(self, index: int) -> None:
        while True:
            with self._lock:
                replica = self._current[index]
            code = replica.child.wait_exit()
            with self._lock:
                if self._stopping:
                    return
                replica.child.kill_group()  # what the dead replica started dies with it
                self._report(
                    f"replica {index} (pid {replica.pid}) {_exit_reason(code)}; restarting it on "
                    f"{self.addresses[index]} (log: {replica.child.log_path})"
                )
                replacement = Replica(
                    index,
                    self.spec,
                    self._report,
                    grpc_port=_port(self.addresses[index]),
                    metrics_port=_port(self.metrics_addresses[index]),
                )
                self._current[index] = replacement
                self.restarts += 1
            replica.stop()  # reaped already: closes its pipe and joins its threads
            try:
                replacement.wait_ready()
            except ChildStartError as exc:
                if self.stopping:
                    return  # stop() ended it while it started
                self._report(f"replica {index} could not be restarted, it stays down: {exc}")
                return

    @property
    def stopping(self) -> bool:
        with self._lock:
            return self._stopping

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            current = list(self._current)
        for replica in current:
            replica.stop()
        for watcher in self._watchers:
            watcher.join()
