"""A replica SIGKILLed under load behind the rendered Envoy costs callers nothing (issue 23, item 6a).

Two real ``sonic serve`` replicas, the real Envoy with the configuration ``sonic deploy`` renders,
and callers that do NOT retry (``tritonclient``, as CMSSW's SonicTriton calls): every call either
returns the right answer or counts as a caller error. One replica is SIGKILLed mid-load; Envoy must
send what was in flight there, and what arrives before it notices the death, to the other one.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic.deploy.envoy_settings import EnvoySettings, Upstream
from sonic.deploy.local import RunningEnvoy, start_envoy
from sonic.launch import ServerProcess

from .conftest import envoy_counter, success_count

pytestmark = pytest.mark.integration

CALLERS = 16
BEFORE_KILL = 400  # calls completed before the kill: every caller has a connection and calls in flight
AFTER_KILL = 1500  # calls completed after it: well past Envoy's ejection of the dead replica
DEADLINE_S = 120.0


class NonRetryingCallers:
    """``CALLERS`` threads, each its own ``tritonclient.grpc`` client, calling ``identity`` with
    distinct data until stopped; each answer is compared with what was sent."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.completed = 0
        self.errors: list[str] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._call, args=(i,)) for i in range(CALLERS)]

    def _call(self, index: int) -> None:
        client = grpcclient.InferenceServerClient(self.address)
        sequence = 0
        try:
            while not self._stop.is_set():
                sent = np.full((1, 16), index * 1_000_000 + sequence, np.float32)
                sequence += 1
                tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
                tensor.set_data_from_numpy(sent)
                try:
                    got = client.infer("identity", [tensor]).as_numpy("OUTPUT0")
                except Exception as exc:  # noqa: BLE001  (every failure is a caller error, reported at the end)
                    outcome = f"{type(exc).__name__}: {exc}"
                else:
                    outcome = "" if got is not None and np.array_equal(got, sent) else f"wrong answer {got}"
                with self._changed:
                    self.completed += 1
                    if outcome:
                        self.errors.append(outcome)
                    self._changed.notify_all()
        finally:
            client.close()

    def wait_completed(self, total: int) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.completed >= total, DEADLINE_S):
                pytest.fail(
                    f"{CALLERS} callers completed {self.completed} of {total} calls in {DEADLINE_S} s"
                )

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


@pytest.fixture
def two_replicas_behind_envoy(
    deploy_repository: Path, tmp_path: Path
) -> Iterator[tuple[list[ServerProcess], RunningEnvoy]]:
    with (
        ServerProcess.start([deploy_repository], log_path=tmp_path / "replica-0.log") as first,
        ServerProcess.start([deploy_repository], log_path=tmp_path / "replica-1.log") as second,
    ):
        settings = EnvoySettings(
            upstream=Upstream(addresses=(first.grpc_address, second.grpc_address)),
            listen_address="127.0.0.1",
            listen_port=0,
            admin_address="127.0.0.1",
            admin_port=0,
        )
        envoy = start_envoy(settings, tmp_path, concurrency=2, wait_timeout_s=60)
        try:
            yield [first, second], envoy
        finally:
            envoy.stop()


def test_sigkill_of_one_of_two_replicas_under_load_costs_no_caller_error(
    two_replicas_behind_envoy: tuple[list[ServerProcess], RunningEnvoy],
) -> None:
    (victim, survivor), envoy = two_replicas_behind_envoy
    with NonRetryingCallers(envoy.address) as callers:
        callers.wait_completed(BEFORE_KILL)
        assert success_count(victim.grpc_address, "identity") > 0, "Envoy sent nothing to the victim"
        os.kill(victim.pid, signal.SIGKILL)
        victim.process.wait()
        killed_at = callers.completed
        callers.wait_completed(killed_at + AFTER_KILL)
    retried = envoy_counter(envoy.admin, "cluster.sonic_replicas.upstream_rq_retry")
    ejected = envoy_counter(envoy.admin, "cluster.sonic_replicas.outlier_detection.ejections_enforced_total")
    print(
        f"{callers.completed} calls, {retried} retried by Envoy, {ejected} ejections, errors {callers.errors[:3]}"
    )
    assert callers.errors == [], (
        f"{len(callers.errors)} caller errors of {callers.completed}: {callers.errors[:3]}"
    )
    assert retried >= 1, "no request met the dead replica: the test proved nothing"
    assert ejected == 1, "outlier detection did not eject the dead replica"
    assert success_count(survivor.grpc_address, "identity") >= AFTER_KILL
