"""`sonic deploy local` for real: replicas behind Envoy, Prometheus, admission control, KEDA's query."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from sonic.client import ClientConfig, SyncClient
from sonic.deploy import grafana
from sonic.deploy.binaries import MissingBinaryError, prometheus_binary
from sonic.deploy.keda import Scaling, desired_replicas
from sonic.deploy.local import LocalSettings, LocalStack
from sonic.deploy.metrics import load_query
from sonic.deploy.process import LoggedChild

from .conftest import Callers, envoy_counter, is_nan_or_none, scalar, success_count, wait_for_prometheus

pytestmark = pytest.mark.integration

WINDOW = "4s"  # rate() window: four scrapes of the test Prometheus
THRESHOLD_MS = 2.0  # queue time per execution: idle replicas are far below, 32 callers of `slow` far above
IDENTITY = {"INPUT0": np.arange(16, dtype=np.float32).reshape(1, 16)}
SLOW = {"INPUT0": np.ones((1, 512), dtype=np.float32)}


@pytest.fixture(scope="module")
def monitored(
    deploy_repository: Path, prometheus_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    settings = LocalSettings(
        repositories=(deploy_repository,),
        replicas=2,
        envoy_port=0,
        prometheus=True,
        prometheus_port=0,
        prometheus_binary=prometheus_binary,
        scrape_interval="1s",
        load_window=WINDOW,
        admission_threshold_ms=THRESHOLD_MS,
        workdir=tmp_path_factory.mktemp("monitored-stack"),
    )
    with LocalStack.start(settings) as stack:
        yield stack


def repository_index(address: str) -> list[str]:
    client = grpcclient.InferenceServerClient(address)
    try:
        return [m.name for m in client.get_model_repository_index().models]
    finally:
        client.close()


def test_requests_spread_per_request_across_replicas(monitored: LocalStack) -> None:
    """One client connection to Envoy; every replica serves part of its requests (their own statistics)."""
    before = [success_count(r.grpc_address, "identity") for r in monitored.replicas]
    calls = 48
    with Callers(monitored.envoy_address, "identity", IDENTITY, count=8) as callers:
        callers.wait_completed(calls)
    after = [success_count(r.grpc_address, "identity") for r in monitored.replicas]
    served = [a - b for a, b in zip(after, before, strict=True)]
    assert sum(served) >= calls
    assert min(served) >= calls // 8, f"requests per replica {served}: Envoy did not balance per request"


def test_load_refuses_new_jobs_scales_up_and_every_panel_has_data(monitored: LocalStack) -> None:
    prometheus = monitored.prometheus_address
    query = load_query(WINDOW)
    scaling = Scaling(threshold_ms=THRESHOLD_MS, min_replicas=1, max_replicas=10)
    current = len(monitored.replicas)
    assert "identity" in repository_index(monitored.envoy_address)  # idle: a new job is admitted
    with Callers(monitored.envoy_address, "slow", SLOW, count=32) as callers:
        loaded = wait_for_prometheus(prometheus, query, lambda r: (scalar(r) or 0.0) > THRESHOLD_MS * 1.2)
        with pytest.raises(InferenceServerException) as refused:
            repository_index(monitored.envoy_address)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert "sonic admission: server load" in str(refused.value.message())
        # KEDA's query, evaluated by this Prometheus, asks the HPA for more replicas than run now.
        assert desired_replicas(current, scalar(loaded), scaling) > current
        # Every dashboard panel returns data while the stack is under load.
        for expr in grafana.expressions():
            wait_for_prometheus(prometheus, expr.replace(grafana.RATE_INTERVAL, "10s"), bool, deadline_s=30)
        in_flight_before_stop = callers.completed
    # The jobs already running never saw an error, refusals or not.
    assert not callers.errors, callers.errors[:3]
    assert callers.completed > in_flight_before_stop
    # Envoy counted the refusal itself (the refusal route's direct response).
    refused_total = 'sum(envoy_http_rq_direct_response{envoy_http_conn_manager_prefix="sonic_ingress"})'
    wait_for_prometheus(prometheus, refused_total, lambda r: (scalar(r) or 0.0) >= 1.0, deadline_s=30)
    # After the load: the metric falls back (no execution: NaN), new jobs are admitted, KEDA scales down.
    idle = wait_for_prometheus(
        prometheus, query, lambda r: is_nan_or_none(scalar(r)) or (scalar(r) or 0.0) < THRESHOLD_MS
    )
    assert desired_replicas(current, scalar(idle), scaling) <= current
    assert "slow" in repository_index(monitored.envoy_address)


def test_a_replica_killed_under_32_callers_costs_no_call(deploy_repository: Path, tmp_path: Path) -> None:
    settings = LocalSettings(repositories=(deploy_repository,), replicas=3, envoy_port=0, workdir=tmp_path)
    with (
        LocalStack.start(settings) as stack,
        Callers(stack.envoy_address, "identity", IDENTITY, count=32) as callers,
    ):
        callers.wait_completed(200)
        victim, survivors = stack.replicas[0], stack.replicas[1:]
        before = [success_count(r.grpc_address, "identity") for r in survivors]
        os.kill(victim.pid, signal.SIGKILL)
        victim.process.wait()
        killed_at = callers.completed
        callers.wait_completed(killed_at + 600)
        after = [success_count(r.grpc_address, "identity") for r in survivors]
        rescued = envoy_counter(stack.envoy_admin, "cluster.sonic_replicas.upstream_rq_retry")
    assert not callers.errors, callers.errors[:3]
    print(f"killed replica: {rescued} requests retried by Envoy")
    assert rescued >= 1, "no request was in flight on the killed replica: the test proved nothing"
    assert all(a - b >= 100 for a, b in zip(after, before, strict=True)), (before, after)


def _refuses_connections(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        return True
    return False


@pytest.mark.slow
def test_cli_prints_the_ready_line_serves_and_stops_everything_on_sigterm(
    deploy_repository: Path, prometheus_binary: Path, tmp_path: Path
) -> None:
    command = [
        sys.executable, "-m", "sonic.cli.main", "deploy", "local",
        "--model-repository", str(deploy_repository), "--replicas", "2", "--port", "0",
        "--prometheus", "--prometheus-port", "0", "--prometheus-binary", str(prometheus_binary),
        "--scrape-interval", "1s", "--workdir", str(tmp_path / "stack"),
    ]  # fmt: skip
    cli = LoggedChild("sonic deploy local", command, tmp_path / "cli.log", re.compile(r"^sonic: ready "))
    try:
        cli.wait_ready(180)
        fields = dict(f.split("=", 1) for f in cli.ready_line.removeprefix("sonic: ready ").split())
        replicas = fields["replicas"].split(",")
        assert len(replicas) == 2
        with SyncClient("identity", ClientConfig(servers=(fields["envoy"],))) as client:
            np.testing.assert_array_equal(client.infer(IDENTITY)["OUTPUT0"], IDENTITY["INPUT0"])
        wait_for_prometheus(fields["prometheus"], "count(up == 1)", lambda r: scalar(r) == 3.0)
    finally:
        code = cli.stop(timeout_s=60)
    assert code == 0, cli.tail()
    for address in (fields["envoy"], fields["prometheus"], fields["envoy-admin"], *replicas):
        assert _refuses_connections(address), f"{address} still accepts connections after SIGTERM"


def test_start_failures_say_what_failed_and_leave_nothing_running(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give --prometheus with the threshold"):
        LocalSettings(repositories=(tmp_path,), admission_threshold_ms=1.0)
    result = subprocess.run(
        [sys.executable, "-m", "sonic.cli.main", "deploy", "local", "--model-repository", str(tmp_path),
         "--replicas", "2", "--port", "0", "--serve-arg=--no-such-option", "--workdir", str(tmp_path / "stack")],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert "sonic deploy local: replica 0 exited with code 2 before ready" in result.stderr, result.stderr
    assert "--no-such-option" in result.stderr
    assert not (tmp_path / "stack" / "envoy.log").exists()  # nothing started after the replicas failed
    with pytest.raises(MissingBinaryError, match="no Prometheus binary"):
        prometheus_binary(tmp_path / "prometheus")
