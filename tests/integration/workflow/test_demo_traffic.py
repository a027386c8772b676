"""`sonic demo --traffic-log DIR`: the demo's server records what the demo sent, readable for replay."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from sonic.cli.main import main
from sonic.demos.common import build_models
from sonic.traffic.schema import read_traffic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_records_its_traffic(tmp_path: Path) -> None:
    repository = build_models(tmp_path / "models", ["emtrk_michel"], no_batching=["emtrk_michel"])
    traffic, out = tmp_path / "traffic", tmp_path / "out"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(
            ["demo", "protodune", "--quick", "--events", "1", "--batch-sizes", "235",
             "--out", str(out), "--repository", str(repository), "--traffic-log", str(traffic)]
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
