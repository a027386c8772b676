"""The demonstrators: `sonic demo` at its smallest size, and HLT client jobs on a 2-worker LocalCluster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sonic.cli.main import main
from sonic.client.config import ClientConfig
from sonic.demos.hlt import HltJob
from sonic.launch import ServerProcess
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


def test_demo_smallest_size(
    demo_repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    code = main(["demo", "all", "--quick", "--out", str(out), "--repository", str(demo_repository)])
    printed = capsys.readouterr().out
    assert code == 0, printed
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
