"""Percentiles, the stability rule, the server breakdown from ModelStatistics deltas, ranges."""

from __future__ import annotations

import pytest
from tritonclient.grpc import service_pb2

from sonic.perf.engine import LoadLevel
from sonic.perf.ranges import parse_range
from sonic.perf.stats import Window, is_stable, server_breakdown, summarize_latencies
from sonic.perf.transport import PerfError

pytestmark = pytest.mark.unit


def test_percentiles_nearest_rank() -> None:
    summary = summarize_latencies([i * 1000 for i in range(1, 101)])  # 1..100 us
    assert summary.count == 100
    assert (summary.p50_us, summary.p90_us, summary.p95_us, summary.p99_us) == (50.0, 90.0, 95.0, 99.0)
    assert summary.max_us == 100.0
    assert summary.min_us == 1.0
    assert summary.mean_us == pytest.approx(50.5)


def test_percentiles_of_one_and_none() -> None:
    one = summarize_latencies([7000])
    assert one.p50_us == one.p99_us == one.max_us == 7.0
    assert summarize_latencies([]).count == 0


def _w(rate: float, latency_us: float) -> Window:
    return Window(duration_s=1.0, requests=int(rate), errors=0, mean_latency_us=latency_us)


def test_stable_when_last_three_agree_within_percentage() -> None:
    windows = [_w(50, 900), _w(100, 1000), _w(105, 980), _w(96, 1040)]
    assert is_stable(windows, percentage=10)
    assert not is_stable(windows[:3], percentage=10)  # the first window drags the mean away
    assert not is_stable(windows[-2:], percentage=10)  # fewer than three windows


def test_unstable_throughput_or_latency() -> None:
    assert not is_stable([_w(100, 1000), _w(100, 1000), _w(130, 1000)], percentage=10)
    assert not is_stable([_w(100, 1000), _w(100, 1300), _w(100, 1000)], percentage=10)
    assert is_stable([_w(100, 1000), _w(100, 1300), _w(100, 1000)], percentage=20)


def test_window_without_completions_is_never_stable() -> None:
    assert not is_stable([_w(0, 0), _w(0, 0), _w(0, 0)], percentage=50)


def _stats(success: int, success_ns: int, queue_ns: int, infer_ns: int, inferences: int, executions: int):  # type: ignore[no-untyped-def]
    response = service_pb2.ModelStatisticsResponse()
    for version in ("1", "2"):  # two versions: the totals must add them up
        stats = response.model_stats.add(name="m", version=version)
        stats.inference_stats.success.count = success
        stats.inference_stats.success.ns = success_ns
        stats.inference_stats.queue.ns = queue_ns
        stats.inference_stats.compute_infer.ns = infer_ns
        stats.inference_count = inferences
        stats.execution_count = executions
    return response


def test_server_breakdown_is_a_per_request_delta() -> None:
    before = _stats(10, 10_000_000, 1_000_000, 5_000_000, 80, 10)
    after = _stats(60, 70_000_000, 11_000_000, 35_000_000, 480, 30)
    breakdown = server_breakdown(before, after)
    assert breakdown.requests == 100
    assert breakdown.inferences == 800
    assert breakdown.executions == 40
    assert breakdown.request_us == pytest.approx(1200.0)  # 120 ms over 100 requests
    assert breakdown.queue_us == pytest.approx(200.0)
    assert breakdown.compute_infer_us == pytest.approx(600.0)
    assert breakdown.overhead_us == pytest.approx(400.0)
    assert breakdown.average_batch == pytest.approx(20.0)


def test_server_breakdown_with_no_requests() -> None:
    same = _stats(5, 1000, 0, 0, 5, 5)
    breakdown = server_breakdown(same, same)
    assert breakdown.requests == 0
    assert breakdown.request_us == 0.0
    assert breakdown.average_batch == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:64:x2", [1, 2, 4, 8, 16, 32, 64]),
        ("1:4", [1, 2, 3, 4]),
        ("100:400:100", [100, 200, 300, 400]),
        ("8", [8]),
        ("1:10:x3", [1, 3, 9]),
    ],
)
def test_parse_range(text: str, expected: list[float]) -> None:
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["0:4", "4:1", "1:8:x1", "1:8:0", "a", "1:2:3:4", "-1"])
def test_parse_range_rejects(text: str) -> None:
    with pytest.raises(PerfError, match="range"):
        parse_range(text)


def test_load_level_needs_one_mode() -> None:
    with pytest.raises(PerfError, match="exactly one"):
        LoadLevel()
    with pytest.raises(PerfError, match="exactly one"):
        LoadLevel(concurrency=2, request_rate_per_s=10)
    with pytest.raises(PerfError, match="distribution"):
        LoadLevel(request_rate_per_s=10, distribution="uniform")


def test_a_window_with_errors_is_never_stable() -> None:
    windows = [_w(100, 1000), _w(101, 1000), _w(99, 1000)]
    assert is_stable(windows, percentage=10)
    failing = Window(duration_s=1.0, requests=100, errors=727, mean_latency_us=1000)
    assert not is_stable([*windows[:2], failing], percentage=10)
