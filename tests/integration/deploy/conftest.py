"""Fixtures of the deployment tests: a model repository, the Prometheus binary, Prometheus queries."""

from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

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
