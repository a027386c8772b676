"""``sonic deploy local``: the Kubernetes stack for real on one host.

N ``sonic serve`` replicas (:mod:`sonic.deploy.replicas`: progress as models load, restarted when
one dies), one Envoy rendered by :mod:`sonic.deploy.envoy` from the same settings
as the Kubernetes ConfigMap (only the replica discovery differs: fixed addresses instead of a
headless Service), and optionally Prometheus with the same rules, scraping every replica and Envoy.
Every process is started here and stopped here, by PID.
"""

from __future__ import annotations

import json
import re
import socket
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from sonic.deploy.binaries import envoy_binary, prometheus_binary
from sonic.deploy.envoy import envoy_config
from sonic.deploy.envoy_settings import Admission, EnvoySettings, Upstream
from sonic.deploy.metrics import ScrapeTargets, load_query, local_prometheus_config, recording_rules
from sonic.deploy.process import LoggedChild
from sonic.deploy.replicas import Replica, ReplicaSet, ReplicaSpec, Report
from sonic.deploy.yamltext import to_yaml

ENVOY_READY = re.compile(r"all dependencies initialized\. starting workers")
PROMETHEUS_READY = re.compile(r"Server is ready to receive web requests")


@dataclass(frozen=True)
class LocalSettings:
    repositories: tuple[Path, ...]
    replicas: int = 2
    host: str = "127.0.0.1"
    envoy_port: int = 8001
    envoy_concurrency: int = 2
    prometheus: bool = False
    prometheus_port: int = 9090  # 0: a free port
    prometheus_binary: Path | None = None
    scrape_interval: str = "5s"
    load_window: str = "30s"
    admission_threshold_ms: float | None = None  # None: no admission filter
    serve_args: tuple[str, ...] = ()
    workdir: Path | None = None  # configs, logs, Prometheus data; None: a new temporary folder
    wait_timeout_s: float = 120.0  # Envoy and Prometheus
    # A starting replica is given up after this long without a line of output (each model it
    # loads prints one); 0: never, as long as it runs. Not a limit on the whole start.
    ready_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"--replicas {self.replicas}: at least 1")
        if self.ready_timeout_s < 0:
            raise ValueError(f"--ready-timeout-s {self.ready_timeout_s}: 0 (no limit) or more")
        if self.admission_threshold_ms is not None and not self.prometheus:
            msg = "the admission filter queries Prometheus: give --prometheus with the threshold"
            raise ValueError(msg)


def _free_port(host: str) -> int:
    # Prometheus reports no port it picked, and Envoy's admission filter must know it before
    # Prometheus starts (Prometheus in turn scrapes Envoy): the port is chosen here.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310  (our own local http URL)
        body: bytes = answer.read()
        return body


@dataclass(frozen=True)
class RunningEnvoy:
    child: LoggedChild
    address: str  # the listener, where clients connect
    admin: str

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self) -> int:
        return self.child.stop()


def start_envoy(
    settings: EnvoySettings, workdir: Path, concurrency: int, wait_timeout_s: float
) -> RunningEnvoy:
    """Envoy with ``settings`` (admin port 0: a free one), ready: listeners bound, first health checks done."""
    config_path = workdir / "envoy.yaml"
    config_path.write_text(to_yaml(envoy_config(settings)), encoding="utf-8")
    admin_path = workdir / "envoy-admin-address"
    admin_path.unlink(missing_ok=True)
    command = [
        str(envoy_binary()),
        "--config-path", str(config_path),
        "--concurrency", str(concurrency),
        "--admin-address-path", str(admin_path),
        "--disable-hot-restart",  # several Envoys on one host share no memory segment
        "--log-level", "info",
    ]  # fmt: skip
    child = LoggedChild("envoy", command, workdir / "envoy.log", ENVOY_READY)
    try:
        child.wait_ready(wait_timeout_s)
        admin = admin_path.read_text(encoding="utf-8").strip()
        listeners = json.loads(_get(f"http://{admin}/listeners?format=json"))
    except BaseException:
        child.stop()
        raise
    socket_address = listeners["listener_statuses"][0]["local_address"]["socket_address"]
    return RunningEnvoy(child, f"{socket_address['address']}:{socket_address['port_value']}", admin)


def _quiet(_message: str) -> None:
    pass


class LocalStack:
    def __init__(self, settings: LocalSettings, workdir: Path, report: Report = _quiet) -> None:
        self.settings = settings
        self.workdir = workdir
        spec = ReplicaSpec(
            repositories=settings.repositories,
            host=settings.host,
            serve_args=settings.serve_args,
            workdir=workdir,
            ready_timeout_s=settings.ready_timeout_s,
        )
        self.replica_set = ReplicaSet(spec, settings.replicas, report)
        self.envoy: RunningEnvoy | None = None
        self.prometheus: LoggedChild | None = None
        self.envoy_address = ""
        self.envoy_admin = ""
        self.prometheus_address = ""

    @classmethod
    def start(cls, settings: LocalSettings, report: Report = _quiet) -> LocalStack:
        """Everything ready, or nothing left running; ``report`` gets progress lines as they happen."""
        workdir = settings.workdir or Path(tempfile.mkdtemp(prefix="sonic-deploy-"))
        workdir.mkdir(parents=True, exist_ok=True)
        stack = cls(settings, workdir, report)
        try:
            stack.replica_set.start()
            prometheus_port = 0
            if settings.prometheus:
                prometheus_port = settings.prometheus_port or _free_port(settings.host)
            stack._start_envoy(prometheus_port)
            if settings.prometheus:
                stack._start_prometheus(prometheus_port)
        except BaseException:
            stack.stop()
            raise
        return stack

    @property
    def replicas(self) -> list[Replica]:
        """The replicas running now (a restarted one replaces the one that died, same addresses)."""
        return self.replica_set.replicas

    def envoy_settings(self, prometheus_port: int) -> EnvoySettings:
        settings = self.settings
        admission = None
        if settings.admission_threshold_ms is not None:
            admission = Admission(
                settings.host,
                prometheus_port,
                load_query(settings.load_window),
                settings.admission_threshold_ms,
            )
        return EnvoySettings(
            upstream=Upstream(addresses=tuple(self.replica_set.addresses)),
            listen_address=settings.host,
            listen_port=settings.envoy_port,
            admin_address=settings.host,
            admin_port=0,
            admission=admission,
        )

    def _start_envoy(self, prometheus_port: int) -> None:
        settings = self.envoy_settings(prometheus_port)
        self.envoy = start_envoy(
            settings, self.workdir, self.settings.envoy_concurrency, self.settings.wait_timeout_s
        )
        self.envoy_address, self.envoy_admin = self.envoy.address, self.envoy.admin

    def _start_prometheus(self, port: int) -> None:
        settings = self.settings
        rules_path = self.workdir / "rules.yml"
        rules_path.write_text(to_yaml(recording_rules(settings.load_window)), encoding="utf-8")
        targets = ScrapeTargets(self.replica_set.metrics_addresses, self.envoy_admin)
        config_path = self.workdir / "prometheus.yml"
        config = local_prometheus_config(targets, str(rules_path), settings.scrape_interval)
        config_path.write_text(to_yaml(config), encoding="utf-8")
        self.prometheus_address = f"{settings.host}:{port}"
        command = [
            str(prometheus_binary(settings.prometheus_binary)),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
            f"--web.listen-address={self.prometheus_address}",
        ]
        self.prometheus = LoggedChild(
            "prometheus", command, self.workdir / "prometheus.log", PROMETHEUS_READY
        )
        self.prometheus.wait_ready(settings.wait_timeout_s)
        _get(f"http://{self.prometheus_address}/-/ready")  # raises unless it answers 200

    def ready_line(self) -> str:
        fields = [
            f"envoy={self.envoy_address}",
            f"replicas={','.join(self.replica_set.addresses)}",
        ]
        if self.prometheus is not None:
            fields.append(f"prometheus={self.prometheus_address}")
        fields.append(f"envoy-admin={self.envoy_admin}")
        return "sonic: ready " + " ".join(fields)

    def stop(self) -> None:
        """Envoy first (no new requests), then the replicas drain, then Prometheus."""
        if self.envoy is not None:
            self.envoy.stop()
        self.replica_set.stop()
        if self.prometheus is not None:
            self.prometheus.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
