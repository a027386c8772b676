"""`sonic demo --traffic-log DIR`: the demo's server records what the demo sent, readable for replay."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from sonic.cli.main import main
from sonic.demos.common import build_models
from sonic.models.build import build_repository
from sonic.traffic.schema import read_traffic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.filterwarnings("ignore:.*torch.jit.load. is deprecated")  # TorchScript: what Triton serves
def test_demo_records_its_traffic(tmp_path: Path) -> None:
    repository = build_models(tmp_path / "models", ["emtrk_michel"], no_batching=["emtrk_michel"])
    traffic, out = tmp_path / "traffic", tmp_path / "out"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(
            ["demo", "protodune", "--quick", "--events", "1", "--batch-sizes", "235",
             "--out", str(out), "--repository", str(repository), "--traffic-log", str(traffic),
             "--traffic-log-sample-contents-every", "1"]
        )  # fmt: skip
    assert code == 0, stdout.getvalue()
    assert f"traffic: {traffic}" in stdout.getvalue()
    rows = read_traffic(traffic).to_pylist()
    # One event of 300 patches in requests of 235: two requests per run, one run per model.
    by_model: dict[str, list[int]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row["batch_size"])
    assert set(by_model) == {"emtrk_michel", "emtrk_michel_nobatch"}, by_model
    for model, batches in by_model.items():
        assert sorted(batches) == [65, 235], (model, batches)
    assert all(row["status"] == "OK" and row["input_names"] == ["main_input"] for row in rows)
    assert all(row["input_shapes"] == [[row["batch_size"], 48, 48, 1]] for row in rows)
    assert len({row["arrival_unix_ns"] for row in rows}) == len(rows)  # one record per request
    # The demo's client puts inputs past 64 KiB in shared memory (a local server): kept without contents.
    assert all(row["contents"] is None for row in rows)
    # The trace replayed (seeded inputs of the recorded shapes) against the TorchScript export of the ONNX
    # model it ran on: a few ULP apart.
    build_repository(repository, ["emtrk_michel"], torchscript=True)
    report = _validate(tmp_path / "validate", "--traffic", str(traffic), "--model", "emtrk_michel",
                       "--reference", f"direct:{repository}/emtrk_michel",
                       "--candidate", f"direct:{repository}/emtrk_michel_torchscript",
                       "--rename", "main_input=INPUT__0", "--rename", "emtrk_none_out=OUTPUT__0",
                       "--rename", "michel_out=OUTPUT__1", "--max-ulp", "64", "--timeout-s", "120",
                       "--synthetic", "--concurrency", "1")  # fmt: skip
    assert report["passed"], report
    assert report["requests"] == report["synthetic"] == 2
    outputs = report["models"]["emtrk_michel"]["outputs"]
    assert outputs["emtrk_none_out"]["argmax_agreement"] == 1.0
    assert outputs["michel_out"]["elements"] == 300  # one score per patch, 235 + 65 patches


def _demo(which: str, repository: Path, out: Path, traffic: Path, *args: str) -> None:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["demo", which, "--quick", *args, "--out", str(out), "--repository", str(repository),
                     "--traffic-log", str(traffic), "--traffic-log-sample-contents-every", "1"])  # fmt: skip
    assert code == 0, stdout.getvalue()


def _validate(out: Path, *args: str) -> dict[str, Any]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["--log-level", "WARNING", "validate", *args, "--out", str(out)])
    assert code in (0, 1), stdout.getvalue()
    report: dict[str, Any] = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["passed"] == (code == 0)
    return report


@pytest.mark.filterwarnings("ignore:.*torch.jit.load. is deprecated")  # TorchScript: what Triton serves
def test_the_hlt_trace_replayed_against_the_torchscript_form(tmp_path: Path) -> None:
    """The HLT demo's recorded requests, sent to the ONNX model it ran on and to its TorchScript export:
    the two frameworks differ in the last bits, far below any physics resolution."""
    repository = build_models(tmp_path / "models", ["facile"], no_batching=["facile"])
    build_repository(repository, ["facile"], torchscript=True)
    _demo("hlt", repository, tmp_path / "hlt", tmp_path / "traffic",
          "--clients", "1", "--events-per-client", "2", "--rechits", "300")  # fmt: skip
    hlt = ["--traffic", str(tmp_path / "traffic"), "--model", "facile",
           "--reference", f"direct:{repository}/facile", "--candidate", f"direct:{repository}/facile_torchscript",
           "--rename", "rechit_features=INPUT__0", "--rename", "energy=OUTPUT__0"]  # fmt: skip
    exact = _validate(tmp_path / "exact", *hlt)
    energy = exact["models"]["facile"]["outputs"]["energy"]
    assert exact["requests"] >= 2
    assert energy["requests"] == exact["requests"]
    assert 0 < energy["max_abs"] < 1e-5
    assert _validate(tmp_path / "tolerant", *hlt, "--atol", "1e-5")["passed"]
