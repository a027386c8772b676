"""`sonic perf` in-process: CSV and JSON schema, plot, errors; `sonic scale` commands."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.cli.main import main
from sonic.launch import ServerProcess
from sonic.perf.report import COLUMNS

pytestmark = pytest.mark.integration

QUICK_ARGS = ["--measurement-interval-s", "0.5", "--stable-windows", "2", "--max-windows", "3"]
QUICK_ARGS += ["--stability-percentage", "50"]


def test_perf_writes_csv_json_and_plot(
    perf_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "perf", "-m", "identity", "-u", perf_server.grpc_address, "--concurrency", "1:2:x2", "-b", "4",
            *QUICK_ARGS, "--csv", str(out / "r.csv"), "--json", str(out / "r.json"), "--plot", str(out / "r.png"),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "concurrency 1 window 1" in captured.err  # live progress
    assert captured.out.count("infer/s") == 2

    with (out / "r.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames or ()) == COLUMNS
    assert [int(r["concurrency"]) for r in rows] == [1, 2]
    assert all(int(r["batch_size"]) == 4 and int(r["requests"]) > 0 for r in rows)

    document = json.loads((out / "r.json").read_text())
    assert document["schema_version"] == 3
    assert document["shared_memory"] == {"kind": "none", "output_shared_memory_size": None}
    assert document["errors"] == 0
    assert document["tool"] == "sonic perf"
    assert document["model"] == "identity"
    assert document["max_batch_size"] == 1024
    assert document["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "dims": [16]}]
    assert document["columns"] == list(COLUMNS)
    assert document["notes"] == []  # our server answers ModelStatistics
    for result in document["results"]:
        assert list(result) == list(COLUMNS)
        assert result["inferences_per_s"] == pytest.approx(4 * result["requests_per_s"], rel=1e-3)
        assert result["latency_p50_us"] <= result["latency_p90_us"] <= result["latency_p95_us"]
        assert result["latency_p95_us"] <= result["latency_p99_us"] <= result["latency_max_us"]
        assert result["server_inferences"] == 4 * result["server_requests"]
        assert isinstance(result["stable"], bool)
        assert result["shared_memory"] == "none"  # tensors in the requests, the default
    assert (out / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for kind, name in (("CSV (sonic columns)", "r.csv"), ("JSON", "r.json"), ("PNG", "r.png")):
        assert f"sonic perf: wrote {kind} to {out / name}" in captured.err
    assert captured.out.count("; 0 errors") == 2


# Fails every request whose input holds a negative number: the perf run below sends such a request
# every other time, so windows both complete requests and fail them.
HALF_FAILING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (x < 0).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""

HALF_FAILING_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


@pytest.fixture(scope="module")
def failing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("failing")
    (root / "half_failing" / "1").mkdir(parents=True)
    (root / "half_failing" / "1" / "model.py").write_text(HALF_FAILING_MODEL)
    (root / "half_failing" / "config.pbtxt").write_text(HALF_FAILING_CONFIG)
    with ServerProcess.start([root]) as process:
        yield process


def test_perf_counts_errors_and_fails_unless_allowed(
    failing_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [1, 2, 3, 4]}, {"INPUT0": [-1, 2, 3, 4]}]}))
    args = [
        "perf",
        "-m",
        "half_failing",
        "-u",
        failing_server.grpc_address,
        "--input-data",
        str(data),
        *QUICK_ARGS,
    ]
    out = tmp_path / "r.json"
    code = main([*args, "--json", str(out), "--csv", str(tmp_path / "r.csv")])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    document = json.loads(out.read_text())
    (result,) = document["results"]
    assert result["errors"] > 0
    assert result["errors_all_windows"] >= result["errors"]
    assert document["errors"] == result["errors_all_windows"]
    assert result["stable"] is False  # a level with errors is never stable
    assert "(stable)" not in captured.err
    assert f"; {result['errors_all_windows']} errors (last: " in captured.out
    assert "negative input" in captured.out
    assert f"sonic perf: {result['errors_all_windows']} requests failed; exit status 1" in captured.err
    with (tmp_path / "r.csv").open(newline="") as handle:
        assert int(next(csv.DictReader(handle))["errors_all_windows"]) == result["errors_all_windows"]

    assert main([*args, "--allow-errors", "-q"]) == 0
    assert "(--allow-errors: exit status 0)" in capsys.readouterr().err


@pytest.mark.parametrize("loop", ["auto", "asyncio"])  # uvloop (installed here), and the standard loop
def test_perf_input_data_file(perf_server: ServerProcess, tmp_path: Path, loop: str) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"INPUT0": list(range(16))}, {"INPUT0": [1.5] * 16}]}))
    out = tmp_path / "r.json"
    code = main(
        ["perf", "-m", "identity", "-u", perf_server.grpc_address, "-b", "3", "--input-data", str(data),
         *QUICK_ARGS, "--json", str(out), "-q", "--loop", loop]
    )  # fmt: skip
    assert code == 0
    assert json.loads(out.read_text())["results"][0]["requests"] > 0


def test_perf_reports_bad_arguments(perf_server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "-m", "identity", "-u", perf_server.grpc_address, "-b", "2048", *QUICK_ARGS]) == 1
    assert "batch size must be in 1..1024" in capsys.readouterr().err
    assert main(["perf", "-m", "identity", "-u", perf_server.grpc_address, "--concurrency", "0:4"]) == 1
    assert "range '0:4'" in capsys.readouterr().err


def test_scale_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scale", "protodune"]) == 0
    assert "68:1" in capsys.readouterr().out
    measurements = tmp_path / "m.csv"
    rows = ["clients,servers,time_per_event_s"]
    rows += [f"{n},1,{max(10.0, 0.5 * n)}" for n in (4, 8, 12, 16, 30, 40, 60)]
    measurements.write_text("\n".join(rows) + "\n")
    fitted = tmp_path / "fit.json"
    code = main(["scale", "fit", str(measurements), "--json", str(fitted), "--plot", str(tmp_path / "f.png")])
    assert code == 0
    result = json.loads(fitted.read_text())
    assert result["ideal_s"] == pytest.approx(10.0)
    assert result["gpu_s"] == pytest.approx(0.5)
    assert result["saturation_ratio"] == pytest.approx(20.0)
    assert (tmp_path / "f.png").exists()
    assert main(["scale", "simulate", "--clients", "10:30:10", "--cpu-s", "1", "--exec-fixed-s", "0.05"]) == 0
    assert capsys.readouterr().out.count("\n") >= 4


def test_scale_predict_and_from_perf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["scale", "predict", "--cpu-s", "117", "--gpu-s", "2.7", "--latency-s", "2.3", "--servers", "4"])
        == 0
    )
    out = capsys.readouterr().out
    assert "t_ideal = 122 s" in out
    assert "45.2 clients per server" in out
    report = {
        "results": [
            {"concurrency": 1, "request_rate_per_s": 0.0, "requests_per_s": 50.0, "client_wire_us": 1000.0},
            {"concurrency": 4, "request_rate_per_s": 0.0, "requests_per_s": 100.0, "client_wire_us": 3000.0},
        ]
    }
    path = tmp_path / "perf.json"
    path.write_text(json.dumps(report))
    code = main(["scale", "from-perf", str(path), "--cpu-s", "0.9", "--requests-per-event", "3"])
    assert code == 0
    out = capsys.readouterr().out
    assert "t_GPU = 0.03 s per event" in out  # 3 requests at the peak of 100 req/s
    assert "t_ideal = 0.933 s" in out  # 0.9 + 0.03 + 3 x 1 ms of wire time at the lightest load
