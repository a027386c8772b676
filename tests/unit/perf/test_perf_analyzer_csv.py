"""perf_analyzer 2.51's ``-f`` CSV from sonic perf's figures: header variants, arithmetic, order."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import service_pb2

from sonic.cli.main import main
from sonic.perf.engine import LevelResult, LoadLevel
from sonic.perf.perf_analyzer_csv import header, lines
from sonic.perf.stats import LatencySummary, PhaseAverages, ServerBreakdown, server_breakdown

pytestmark = pytest.mark.unit

# perf_analyzer 2.51's own header lines (its -f output against sonic serve, identity, gRPC)
PLAIN = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)
VERBOSE_TAIL = ",Avg latency,request/response,response wait"


def _result(
    level: LoadLevel, requests: int, *, mean_us: float = 500.0, server: ServerBreakdown | None = None
) -> LevelResult:
    latency = LatencySummary(requests, mean_us, 100.0, 400.4, 900.9, 950.0, 2000.0, 3000.0)
    return LevelResult(
        level=level, batch_size=2, stable=True, windows=3, duration_s=1.0, requests=requests, errors=0,
        delayed_requests=0, latency=latency, client_serialize_us=3.6, client_deserialize_us=1.2,
        server=server,
    )  # fmt: skip


def _server(per_count: PhaseAverages) -> ServerBreakdown:
    return ServerBreakdown(100, 200, 50, 0, 300.0, 100.0, 5.0, 40.0, 5.0, 150.0, per_count=per_count)


PHASES = PhaseAverages(
    queue_ns=100_901,
    compute_input_ns=5_100,
    compute_infer_ns=40_999,
    compute_output_ns=5_001,
    compute_ns=51_100,
)


def test_headers_match_perf_analyzer() -> None:
    options = {"concurrency": True, "server_stats": True, "response_cache": False}
    assert ",".join(header(**options, verbose=False)) == PLAIN
    assert ",".join(header(**options, verbose=True)) == PLAIN + VERBOSE_TAIL
    rate = header(concurrency=False, server_stats=True, response_cache=False, verbose=False)
    assert ",".join(rate) == PLAIN.replace("Concurrency", "Request Rate")
    cached = header(concurrency=True, server_stats=True, response_cache=True, verbose=False)
    assert cached[8:11] == ["Server Cache Hit", "Server Cache Miss", "Client Recv"]
    bare = header(concurrency=True, server_stats=False, response_cache=True, verbose=False)
    assert bare[:4] == ["Concurrency", "Inferences/Second", "Client Send", "Client Recv"]
    assert len(bare) == 8


def test_row_arithmetic_is_perf_analyzers() -> None:
    result = _result(LoadLevel(concurrency=4), 1000, server=_server(PHASES))
    text = lines([result], response_cache=False, verbose=True)
    cells = text[1].split(",")
    # wait 500 us less queue 100.901 and compute 51.1: 347.999 us, truncated as every figure
    assert cells == ["4", "2000", "3", "347", "100", "5", "40", "5", "1",
                     "405", "905", "954", "2004", "504", "4", "500"]  # fmt: skip


def test_network_time_is_never_negative_and_cache_columns_follow_the_config() -> None:
    phases = PhaseAverages(queue_ns=900_000, compute_ns=10_000, cache_hit_ns=2_500, cache_miss_ns=7_000)
    text = lines(
        [_result(LoadLevel(concurrency=1), 10, server=_server(phases))], response_cache=True, verbose=False
    )
    cells = dict(zip(text[0].split(","), text[1].split(","), strict=True))
    assert cells["Network+Server Send/Recv"] == "0"
    assert (cells["Server Cache Hit"], cells["Server Cache Miss"]) == ("2", "7")


def test_rows_by_increasing_throughput_and_request_rates_as_doubles() -> None:
    results = [
        _result(LoadLevel(request_rate_per_s=150.5), 300),
        _result(LoadLevel(request_rate_per_s=50), 100),
        _result(LoadLevel(request_rate_per_s=1e6), 1_234_567),
    ]
    text = lines(results, response_cache=False, verbose=False)
    assert text[0].startswith("Request Rate,Inferences/Second,Client Send,Client Recv,p50 latency")
    assert [line.split(",")[:2] for line in text[1:]] == [
        ["50", "200"],
        ["150.5", "600"],
        ["1e+06", "2.46913e+06"],
    ]
    assert lines([], response_cache=False, verbose=False) == []


def test_server_columns_only_when_every_level_has_statistics() -> None:
    results = [
        _result(LoadLevel(concurrency=1), 10, server=_server(PHASES)),
        _result(LoadLevel(concurrency=2), 20),
    ]
    assert "Server Queue" not in lines(results, response_cache=False, verbose=False)[0]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--csv-format", "perf_analyzer"], "--csv-format perf_analyzer needs -f/--csv FILE"),
        (["-f", "out.csv", "--verbose-csv"], "--verbose-csv applies to --csv-format perf_analyzer"),
        (["--replay", "traffic", "-f", "out.csv"], "--replay reports with --json"),
    ],
)
def test_csv_options_never_ignored(
    arguments: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["perf", "-m", "identity", "-u", "127.0.0.1:1", *arguments]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_phase_averages_use_each_phase_count() -> None:
    before, after = service_pb2.ModelStatisticsResponse(), service_pb2.ModelStatisticsResponse()
    stats = after.model_stats.add(name="m", version="1")
    inference = stats.inference_stats
    inference.success.count, inference.success.ns = 10, 3_000_000
    inference.queue.count, inference.queue.ns = 4, 1_000_003  # six of the ten were cache hits
    for phase in (inference.compute_input, inference.compute_infer, inference.compute_output):
        phase.count, phase.ns = 4, 400_000
    inference.cache_hit.count, inference.cache_hit.ns = 6, 60_000
    inference.cache_miss.count, inference.cache_miss.ns = 4, 8_000
    per_count = server_breakdown(before, after).per_count
    assert per_count == PhaseAverages(250_000, 100_000, 100_000, 100_000, 300_000, 10_000, 2_000)
