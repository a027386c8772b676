"""Fixtures of the deployment tests: a model repository, the Prometheus binary, Prometheus queries."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import math
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sonic.client import AsyncClient, ClientConfig
from sonic.models.simple import write_sample_repository
from sonic.models.testing import slow_model

REPO_ROOT = Path(__file__).resolve().parents[3]
SLOW_CONFIG = """
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
dynamic_batching { }
"""


@pytest.fixture(scope="session")
def deploy_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``identity`` and ``add_sub`` (fast), ``slow`` (tens of ms per batch: queues build under load)."""
    root = write_sample_repository(tmp_path_factory.mktemp("deploy-repository"))
    slow_model(root / "slow" / "1" / "model.onnx", depth=12)
    (root / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    return root


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    """Debian's Prometheus, unpacked by tools/install-prometheus.sh (``./dev test`` runs it)."""
    given = os.environ.get("SONIC_PROMETHEUS")
    path = Path(given) if given else REPO_ROOT / ".tools" / "prometheus" / "usr" / "bin" / "prometheus"
    if not path.is_file():
        pytest.skip(f"no Prometheus at {path}: run tools/install-prometheus.sh (./dev test does)")
    return path


def prometheus_query(address: str, query: str) -> list[dict[str, object]]:
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def scalar(result: list[dict[str, object]]) -> float | None:
    """The single value of an instant vector; None when empty (no series)."""
    if not result:
        return None
    value = result[0]["value"]
    assert isinstance(value, list)
    return float(value[1])


def wait_for_prometheus(
    address: str, query: str, accept: Callable[[list[dict[str, object]]], bool], deadline_s: float = 60.0
) -> list[dict[str, object]]:
    """Poll Prometheus until ``accept`` holds for the query's answer, or fail at the deadline.

    Prometheus is an external system that computes rates from its own scrapes and pushes nothing:
    asking its API again is the only way to learn that a value has been reached. The interval is
    one scrape; the deadline bounds the wait.
    """
    end = time.monotonic() + deadline_s
    while True:
        result = prometheus_query(address, query)
        if accept(result):
            return result
        if time.monotonic() > end:
            pytest.fail(
                f"Prometheus query {query!r} did not reach the expected value in {deadline_s} s: {result}"
            )
        time.sleep(1.0)  # one scrape interval of the test Prometheus


def is_nan_or_none(value: float | None) -> bool:
    return value is None or math.isnan(value)


class Callers:
    """``count`` concurrent callers of one model through one ``sonic.client``, until stopped.

    They run on an event loop in a thread of their own, so the test can act (kill a replica, ask
    Envoy for the RepositoryIndex) while they call; every call's outcome is counted.
    """

    def __init__(
        self, address: str, model: str, inputs: dict[str, npt.NDArray[Any]], count: int = 32
    ) -> None:
        self.address, self.model, self.inputs, self.count = address, model, inputs, count
        self.completed = 0
        self.errors: list[BaseException] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="callers")

    async def _main(self) -> None:
        client = AsyncClient(self.model, ClientConfig(servers=(self.address,)))
        async with client, asyncio.TaskGroup() as group:
            for _ in range(self.count):
                group.create_task(self._caller(client))

    async def _caller(self, client: AsyncClient) -> None:
        while not self._stop.is_set():
            try:
                await client.infer(self.inputs)
            except Exception as exc:  # noqa: BLE001  (every failure is a test failure, reported at the end)
                with self._changed:
                    self.errors.append(exc)
            else:
                with self._changed:
                    self.completed += 1
                    self._changed.notify_all()

    def wait_completed(self, total: int, timeout_s: float = 60.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.completed >= total or self.errors, timeout_s):
                pytest.fail(
                    f"{self.count} callers completed {self.completed} calls of {total} in {timeout_s} s"
                )
        assert not self.errors, self.errors[:3]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def success_count(grpc_address: str, model: str) -> int:
    """Successful requests of ``model`` by the replica's own statistics."""
    client = grpcclient.InferenceServerClient(grpc_address)
    try:
        stats = client.get_inference_statistics(model_name=model)
    finally:
        client.close()
    return sum(int(m.inference_stats.success.count) for m in stats.model_stats)


def envoy_counter(admin_address: str, name: str) -> int:
    """One counter of Envoy's admin /stats, e.g. ``cluster.sonic_replicas.upstream_rq_retry``."""
    url = f"http://{admin_address}/stats?format=json&filter=" + urllib.parse.quote(f"^{name}$")
    with urllib.request.urlopen(url, timeout=10) as answer:
        stats = json.loads(answer.read())["stats"]
    return sum(int(s["value"]) for s in stats if s.get("name") == name)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost (and its key), as a site's TLS Secret would hold."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sonic-envoy")])
    now = dt.datetime.now(dt.UTC)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path
