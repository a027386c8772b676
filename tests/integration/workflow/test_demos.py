"""The demonstrators: `sonic demo` at its smallest size, and HLT client jobs on a 2-worker LocalCluster."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from sonic.cli.main import main
from sonic.client.config import ClientConfig
from sonic.demos.hlt import HltJob
from sonic.demos.report import PLOTS
from sonic.launch import ServerProcess
from sonic.testing import chromium
from sonic.workflow import CpuWork
from sonic.workflow.dask import DaskConfig, run_jobs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_dask_jobs_on_two_workers(demo_repository: Path) -> None:
    pytest.importorskip("distributed")
    with ServerProcess.start([demo_repository]) as server:
        job = HltJob(
            ClientConfig(servers=(server.grpc_address,)),
            "facile",
            rechits=500,
            events=3,
            rest_s=0.005,
            work=CpuWork.calibrate(0.05),
        )
        results = run_jobs(job, 4, DaskConfig(workers=2, threads_per_worker=2))
    assert [r["job"] for r in results.results] == [0, 1, 2, 3]
    assert all(r["events"] == 3 for r in results.results)
    assert all(
        r["latency_mean_s"] > 0 and r["finished_unix_s"] > r["started_unix_s"] for r in results.results
    )
    # Four jobs, two workers of two threads each: Dask gives both workers jobs, each a separate process.
    workers = {r["worker"] for r in results.results}
    assert len(workers) == 2, workers
    assert all(worker.startswith("tcp://") for worker in workers), workers


@dataclass(frozen=True)
class DemoRun:
    out: Path
    code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def demo_run(demo_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`sonic demo all --quick`, once for this module's tests: what it printed and wrote."""
    out = tmp_path_factory.mktemp("demo") / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["demo", "all", "--quick", "--out", str(out), "--repository", str(demo_repository)])
    return DemoRun(out, code, stdout.getvalue(), stderr.getvalue())


def test_demo_smallest_size(demo_run: DemoRun) -> None:
    out, printed = demo_run.out, demo_run.stdout
    assert demo_run.code == 0, printed
    summary = json.loads((out / "summary.json").read_text())
    for name in ("protodune", "hlt", "miniaod"):
        assert summary[name]["identical"] is True, name
    protodune = summary["protodune"]
    assert set(protodune["runs"]) == {
        "direct", "service b235 nodyn", "service b235 dyn", "service b1693 nodyn", "service b1693 dyn"
    }  # fmt: skip
    direct = protodune["runs"]["direct"]
    assert direct["transfer_s"] == direct["travel_s"] == 0.0
    assert direct["server_compute_s"] > 0
    assert direct["preprocessing_s"] > 0
    small = protodune["runs"]["service b235 dyn"]
    assert small["requests_per_event"] == 2  # 300 patches in requests of 235
    assert small["travel_s"] > 0
    assert protodune["scaling"]["predicted_clients_per_server"] > 1
    hlt = summary["hlt"]
    assert [p["clients"] for p in hlt["sweep"]["dynamic_batching"]] == [1, 2, 4]
    assert all(
        np.isfinite(p["events_per_s"]) and p["events_per_s"] > 0 for p in hlt["sweep"]["no_dynamic_batching"]
    )
    miniaod = summary["miniaod"]["runs"]
    assert 0 < miniaod["direct"]["ml_fraction"] < 1
    assert 0 < miniaod["service"]["ml_fraction"] < 1
    for png in ("protodune/breakdown.png", "hlt/throughput.png", "miniaod/fractions.png"):
        assert (out / png).stat().st_size > 1000
    assert (out / "protodune" / "direct.json").is_file()
    assert sorted(Path(p).name for p in protodune["outputs"]) == ["scores.parquet", "scores.root"]
    assert "clients per server" in printed


def test_demo_keeps_library_logs_off_the_screen(demo_run: DemoRun) -> None:
    log = (demo_run.out / "demo.log").read_text()
    assert "distributed.scheduler" in log  # Dask's LocalCluster logged at INFO, into the file
    assert "sonic.server.models.manager" in log
    screen = demo_run.stdout + demo_run.stderr
    assert " INFO " not in screen, screen
    summary = demo_run.stdout[demo_run.stdout.index("summary (seconds per event)") :]
    for name in ("protodune", "hlt", "miniaod"):
        assert name in summary
        assert str(demo_run.out / PLOTS[name]) in summary
    assert str((demo_run.out / "report.html").resolve()) in summary
    assert "PROJECTION" in demo_run.stdout  # GPU figures are labelled as projections


def test_demo_report_renders_in_chromium(demo_run: DemoRun, browser: Path, tmp_path: Path) -> None:
    page = demo_run.out / "report.html"
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 3  # the plots travel inside the one file
    assert "Projection: the same run with a GPU server" in text
    assert "Measured on a GPU: no GPU run" in text
    chromium.assert_renders(browser, page, tmp_path, (1100, 4400))
