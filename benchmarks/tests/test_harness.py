"""The benchmark harness's pure parts: visiting orders, paired ratios, tables, generated doc blocks,
named options, the closed loop's counting."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
from benchmarks.harness.load import closed_loop
from benchmarks.harness.processes import cpu_seconds, thread_cpu_seconds
from benchmarks.harness.ratios import paired_ratios, per_server, spread
from benchmarks.harness.report import markdown_table, replace_between
from benchmarks.harness.rounds import ordered, visits
from benchmarks.harness.servers import parse_named

pytestmark = pytest.mark.unit


def test_orders_rotate_alternate_and_shuffle() -> None:
    names = ["a", "b", "c"]
    assert [ordered(names, i, "rotate") for i in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]
    ]  # fmt: skip
    assert [ordered(names, i, "alternate") for i in range(3)] == [names, names[::-1], names]
    assert sorted(ordered(names, 5, "shuffle")) == names
    with pytest.raises(ValueError, match="order 'sideways'"):
        ordered(names, 0, "sideways")


def test_visits_cover_every_pair_each_round_with_per_workload_servers() -> None:
    def servers(workload: str) -> list[str]:
        return ["x", "y"] if workload == "small" else ["x"]

    seen = [(v.round, v.workload, v.server) for v in visits(2, ["small", "large"], servers)]
    assert seen == [
        (0, "small", "x"), (0, "small", "y"), (0, "large", "x"),
        (1, "small", "y"), (1, "small", "x"), (1, "large", "x"),
    ]  # fmt: skip


def test_ratios_are_paired_within_a_round() -> None:
    rows = [
        {"round": 0, "server": "ours", "rate": 300.0},
        {"round": 0, "server": "ref", "rate": 200.0},
        {"round": 1, "server": "ours", "rate": 100.0},
        {"round": 1, "server": "ref", "rate": 200.0},
        {"round": 2, "server": "ours", "rate": 50.0},  # the reference missed this round: no pair
        {"round": 3, "server": "ours", "rate": 10.0},
        {"round": 3, "server": "ref", "rate": 0.0},  # nothing done: no ratio either
    ]
    ratio = paired_ratios(rows, "rate", "ours", "ref")
    assert ratio is not None
    # 1.5 and 0.5: the median of paired ratios is 1.0, whatever the ratio of medians
    assert (ratio.median, ratio.min, ratio.max, ratio.values) == (1.0, 0.5, 1.5, (1.5, 0.5))
    assert paired_ratios(rows, "rate", "ours", "absent") is None
    figures = per_server(rows, "rate")
    assert figures["ours"].values == (300.0, 100.0, 50.0, 10.0)
    assert figures["ref"].median == 200.0
    assert spread([3, 1, 2]).as_dict(digits=1) == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
        "rounds": [3.0, 1.0, 2.0],
    }
    assert spread([0.84, 0.5, 1.25]).text() == "0.84 [0.50-1.25]"
    with pytest.raises(ValueError, match="no values"):
        spread([])


def test_table_and_generated_block(tmp_path: Path) -> None:
    lines = markdown_table(["workload", "req/s"], [["identity", "1,000"]])
    assert lines == ["| workload | req/s |", "|---|---:|", "| identity | 1,000 |"]
    doc = tmp_path / "doc.md"
    doc.write_text("# T\n<!-- s -->\nold\n<!-- e -->\nprose\n")
    assert replace_between(doc, "<!-- s -->", "<!-- e -->", lines)
    assert doc.read_text() == "# T\n<!-- s -->\n" + "\n".join(lines) + "\n<!-- e -->\nprose\n"
    bare = tmp_path / "bare.md"
    bare.write_text("# B\n")
    assert not replace_between(bare, "<!-- s -->", "<!-- e -->", lines)
    assert bare.read_text() == "# B\n"


def test_named_options() -> None:
    assert parse_named(["base=/a/src", "after=src=x"], "--tree") == {"base": "/a/src", "after": "src=x"}
    with pytest.raises(SystemExit, match="--tree 'src': expected NAME=VALUE"):
        parse_named(["src"], "--tree")


def test_closed_loop_counts_every_completed_call_and_stops_at_the_deadline() -> None:
    started = [0]

    async def call() -> None:
        started[0] += 1
        await asyncio.sleep(0.002)

    count, elapsed = asyncio.run(closed_loop(call, 3, 0.05))
    assert count == started[0] >= 3  # a call begun before the deadline completes and is counted
    assert 0.05 <= elapsed < 1.0  # no call begins after it


def test_thread_cpu_is_counted_per_thread() -> None:
    spun, done = threading.Event(), threading.Event()

    def spin() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        spun.set()
        done.wait(30)

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(30)
        times = thread_cpu_seconds(os.getpid())
    finally:
        done.set()
        worker.join(30)
    assert worker.native_id is not None
    assert times[worker.native_id] >= 0.15  # /proc counts in clock ticks (10 ms)
    assert os.getpid() in times  # the main thread's id is the process's
    assert sum(times.values()) <= cpu_seconds(os.getpid()) + 0.05
