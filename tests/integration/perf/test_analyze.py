"""`sonic analyze` finds the known-best configuration of a model whose cost is fixed per execution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sonic.cli.main import main
from sonic.perf.analyze import AnalyzeConfig, SearchSpace, run_analysis
from sonic.perf.engine import LoadLevel
from sonic.protocol.model_config import load_config_file

from .conftest import QUICK

pytestmark = pytest.mark.integration


def test_analyze_prefers_dynamic_batching_for_a_fixed_cost_model(
    perf_repository: Path, tmp_path: Path
) -> None:
    out = tmp_path / "analysis"
    code = main(
        [
            "analyze", "--model-repository", str(perf_repository), "-m", "fixed_cost",
            "--instance-counts", "1", "--max-batch-sizes", "16", "--dynamic-batching", "off,on",
            "--max-queue-delays-us", "0", "--concurrency", "16",
            "--measurement-interval-s", "0.5", "--stable-windows", "2", "--max-windows", "3",
            "--stability-percentage", "50", "--time-budget-s", "120", "--repeats", "2", "-o", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    ranked = report["candidates"]
    assert [c["rank"] for c in ranked] == [1, 2]
    best, other = ranked
    summary = (out / "report.md").read_text()
    assert best["dynamic_batching"] is True, summary
    assert other["dynamic_batching"] is False
    assert best["runs"] == other["runs"] == 2  # best of two rounds: a slow spell of the machine hits one run
    # batching up to 16 waiting requests into one execution of the same cost: several times the throughput
    assert best["score"] >= 1.5 * other["score"], summary
    assert best["levels"][0]["server_average_batch"] > 1.5
    # no batching: one request per execution (the window edges can split a request from its execution)
    assert other["levels"][0]["server_average_batch"] == pytest.approx(1.0, abs=0.1)
    config = load_config_file(out / "config.pbtxt")
    assert config.HasField("dynamic_batching")
    assert config.max_batch_size == 16
    assert config.instance_group[0].count == 1
    assert "| 1 |" in (out / "report.md").read_text()
    assert (out / "throughput_vs_p99.png").exists()


def test_analyze_respects_its_time_budget(perf_repository: Path) -> None:
    config = AnalyzeConfig(
        repository=perf_repository,
        model="fixed_cost",
        levels=(LoadLevel(concurrency=1),),
        space=SearchSpace(instance_counts=(1, 2), max_batch_sizes=(4, 8), max_queue_delays_us=(0,)),
        measurement=QUICK,
        time_budget_s=0.0,
    )
    report = run_analysis(config)
    assert len(report.ranked) == 8  # 2 instance counts x 2 max batch sizes x batching off/on
    assert all(r.result.error.startswith("skipped: time budget") for r in report.ranked)
    assert report.best is None


def test_candidates_never_exceed_what_requests_need() -> None:
    space = SearchSpace(
        instance_counts=(1,),
        max_batch_sizes=(4, 16),
        preferred_batch_sizes=((8,), (2, 32)),
        max_queue_delays_us=(0, 100),
    )
    candidates = space.candidates(model_batches=True, request_batch_size=8)
    assert all(c.max_batch_size == 16 for c in candidates)  # 4 cannot hold a request of 8
    assert all(all(p <= 16 for p in c.preferred_batch_sizes) for c in candidates)
    assert len(candidates) == 1 + 2 * 2
    assert space.candidates(model_batches=False, request_batch_size=1)[0].dynamic_batching is False


def test_analyze_starts_from_the_auto_completed_config_without_config_pbtxt(
    perf_repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's layout: an ONNX model and no config.pbtxt (it crashed with a traceback before)."""
    repository = tmp_path / "repository"
    (repository / "identity" / "1").mkdir(parents=True)
    onnx_file = perf_repository / "identity" / "1" / "model.onnx"
    (repository / "identity" / "1" / "model.onnx").write_bytes(onnx_file.read_bytes())
    out = tmp_path / "analysis"
    code = main(
        [
            "analyze", "--model-repository", str(repository), "-m", "identity",
            "--instance-counts", "1", "--max-batch-sizes", "4", "--dynamic-batching", "on",
            "--max-queue-delays-us", "0", "--concurrency", "1",
            "--measurement-interval-s", "0.5", "--stable-windows", "2", "--max-windows", "3",
            "--stability-percentage", "50", "--time-budget-s", "60", "-o", str(out), "--no-plots",
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    config = load_config_file(out / "config.pbtxt")
    assert [t.name for t in config.input] == ["INPUT0"]  # completed from the model's signature
    assert [t.name for t in config.output] == ["OUTPUT0"]
    assert config.max_batch_size == 4
    assert not (repository / "identity" / "config.pbtxt").exists()  # the repository is left as it was
