"""The load generator against a real `sonic serve`: latency bounds, counts against ModelStatistics."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from sonic.launch import ServerProcess
from sonic.perf.engine import LoadLevel, PerfConfig, run_perf
from sonic.perf.transport import PerfError

from .conftest import QUICK, success_count

pytestmark = pytest.mark.integration


def _direct_execution_s(model_path: Path, batch: int) -> float:
    """The model's own best execution time in this process, with onnxruntime's defaults as the server.

    The best of many runs: on a shared machine any one run may be slowed by other work.
    """
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feeds = {"INPUT0": np.random.default_rng(0).random((batch, 512), dtype=np.float32)}
    session.run(None, feeds)
    best = float("inf")
    for _ in range(50):
        started = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("transport", ["h2", "grpcio"])
async def test_latency_is_at_least_the_model_execution_and_counts_match_statistics(
    perf_server: ServerProcess, perf_repository: Path, transport: str
) -> None:
    batch = 8
    direct_s = _direct_execution_s(perf_repository / "slow" / "1" / "model.onnx", batch)
    before = success_count(perf_server.grpc_address, "slow")
    config = PerfConfig(
        url=perf_server.grpc_address,
        model="slow",
        levels=(LoadLevel(concurrency=1), LoadLevel(concurrency=2)),
        batch_size=batch,
        measurement=QUICK,
        transport=transport,
    )
    report = await run_perf(config)
    after = success_count(perf_server.grpc_address, "slow")
    direct_s = min(direct_s, _direct_execution_s(perf_repository / "slow" / "1" / "model.onnx", batch))
    assert [r.level.concurrency for r in report.results] == [1, 2]
    for result in report.results:
        server = result.server
        assert server is not None
        assert result.requests > 0
        assert result.errors == 0
        assert 2 <= result.windows <= 3
        # every request waited for one execution of the model: best case against best case (both are the
        # minimum of many samples; the margin covers onnxruntime's run-to-run spread)
        assert result.latency.min_us >= 0.7 * direct_s * 1e6
        assert result.latency.mean_us >= server.compute_infer_us
        assert result.latency.p99_us >= result.latency.p50_us
        # our server counts batch-size inferences per request; no dynamic batching: one execution each
        # (an execution is counted as it ends, its request a moment later: a snapshot may fall between)
        assert server.inferences == server.requests * batch
        assert abs(server.executions - server.requests) <= result.level.concurrency
        # the same windows on both sides, up to the requests in flight at the two boundaries
        assert abs(server.requests - result.requests) <= 2 * result.level.concurrency
        assert result.inferences_per_s == pytest.approx(result.requests_per_s * batch)
    measured = sum(r.requests for r in report.results)
    assert after - before >= measured  # the server saw every request the generator counted, and warm-up


async def test_request_rate_modes(perf_server: ServerProcess) -> None:
    config = PerfConfig(
        url=perf_server.grpc_address,
        model="identity",
        levels=(
            LoadLevel(request_rate_per_s=40, distribution="constant"),
            LoadLevel(request_rate_per_s=40, distribution="poisson"),
        ),
        measurement=QUICK,
    )
    report = await run_perf(config)
    for result in report.results:
        assert result.errors == 0
        # an open loop sends on schedule whatever the answers do: generous bounds on a busy machine
        assert 10 <= result.requests_per_s <= 80, result.level.label
    assert report.results[1].level.distribution == "poisson"


async def test_variable_dims_take_the_given_shape(perf_server: ServerProcess) -> None:
    base = PerfConfig(
        url=perf_server.grpc_address,
        model="variable_dims",
        levels=(LoadLevel(concurrency=1),),
        batch_size=4,
        measurement=QUICK,
    )
    with pytest.raises(PerfError, match="--shape INPUT0:N"):
        await run_perf(base)
    report = await run_perf(dataclasses.replace(base, shapes=(("INPUT0", (32,)),)))
    assert report.results[0].requests > 0
    assert report.model.inputs[0].dims == (-1,)


@pytest.mark.parametrize("transport", ["h2", "grpcio"])
async def test_unknown_model_is_a_clear_error(perf_server: ServerProcess, transport: str) -> None:
    levels = (LoadLevel(concurrency=1),)
    config = PerfConfig(url=perf_server.grpc_address, model="nope", levels=levels, transport=transport)
    with pytest.raises(PerfError, match=r"ModelMetadata for model 'nope'.*not found"):
        await run_perf(config)


def test_unknown_transport_is_a_clear_error() -> None:
    with pytest.raises(PerfError, match="transport 'carrier-pigeon': expected one of grpcio, h2"):
        PerfConfig(
            url="127.0.0.1:1", model="m", levels=(LoadLevel(concurrency=1),), transport="carrier-pigeon"
        )
