"""Mutation run of the differential suite: change one message site of sonic at a time, see if the suite notices.

Each site of ``tests/integration/differential/sites.py`` (an error built with a SonicError subclass on a
request path) is changed in a copy of ``src/sonic``, one at a time, in one of two ways:

- ``text``: the first word of four letters or more of the longest literal part of its message is written
  in the other case (``inference request batch-size`` becomes ``INFERENCE request batch-size``);
- ``status``: the error class becomes another with another status (InvalidArgument and config errors
  become NotFound, every other class InvalidArgument).

For each mutant the differential suite runs against sonic only, with Triton's answers replayed from a
recording (``SONIC_DIFFERENTIAL_REPLAY``, made first with ``SONIC_DIFFERENTIAL_RECORD`` by one run
against real Triton) and every difference written to a report instead of stopping the run. A mutant is
*killed* when the suite reports a difference or fails, *survived* when it passes. One pytest process at a
time. To keep the run short, an unmutated replay first notes which tests reach each site (its sites
report); a mutant runs those tests only, and a site that no test reaches is reported ``not reached``
(a survivor: nothing compares its words) without a run, unless ``--all`` asks for the whole suite. The
result (JSON: every mutant, the kill rate, the survivors) goes to ``--out``.

    PYTHONPATH=src .venv/bin/python tools/mutate_messages.py --out /tmp/mutants.json [--kinds text,status]
        [--only server/models/version.py,protocol/dtypes.py] [--tape /tmp/tape.jsonl]
        [--suite tests/integration/differential/test_reach_sonic.py]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.differential.reach import RECORD_ENV, REPLAY_ENV, SITES_ENV
from tests.integration.differential.sites import (
    SONIC_ROOT,
    Site,
    error_calls,
    find_sites,
    message_node,
)

SUITE = "tests/integration/differential"
REPORT_ENV = "SONIC_DIFFERENTIAL_REPORT"
WORD_LETTERS = 4


def _swap_word(text: str) -> str | None:
    """``text`` with its first word of WORD_LETTERS letters or more in the other case, or None."""
    start = None
    for index, char in enumerate([*text, " "]):
        if char.isalpha():
            start = index if start is None else start
            continue
        if start is not None and index - start >= WORD_LETTERS:
            word = text[start:index]
            swapped = word.lower() if word.isupper() else word.upper()
            return text[:start] + swapped + text[index:]
        start = None
    return None


def _mutate_text(node: ast.expr) -> bool:
    """Swap a word of the message's longest literal part: Triton's words, more often than the context
    sonic puts before them (``model 'm' input 'x': ``)."""
    parts = [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and _swap_word(n.value) is not None
    ]
    if not parts:
        return False
    longest = max(parts, key=lambda n: sum(c.isalpha() for c in str(n.value)))
    longest.value = _swap_word(str(longest.value))
    return True


def other_status(error: str) -> str:
    return (
        "NotFoundError" if error in {"InvalidArgumentError", "ModelConfigError"} else "InvalidArgumentError"
    )


def mutant_source(site: Site, kind: str, source: str) -> str | None:
    """The source of ``site``'s file with the site changed, or None when it cannot be changed that way."""
    tree = ast.parse(source)
    for call, scopes in error_calls(tree):
        if call.lineno != site.line or not isinstance(call.func, ast.Name) or call.func.id != site.error:
            continue
        if kind == "text":
            node = message_node(call, scopes)
            if node is None or not _mutate_text(node):
                return None
        else:
            if len(call.args) != 1 or call.keywords:
                return None  # a class with more arguments (the 405 with its Allow list)
            call.func.id = other_status(site.error)
            future = next(
                i
                for i, s in enumerate(tree.body)
                if isinstance(s, ast.ImportFrom) and s.module == "__future__"
            )
            imported = ast.parse(f"from sonic.protocol.errors import {call.func.id}").body[0]
            tree.body.insert(future + 1, imported)
        return ast.unparse(ast.fix_missing_locations(tree))
    raise LookupError(f"site {site.id} not found in its file")


def run_suite(
    python_path: str,
    tape: Path,
    report: Path,
    *,
    record: bool,
    timeout_s: float,
    tests: list[str] | None = None,
    suite: str = SUITE,
) -> int:
    env = {
        **os.environ,
        "PYTHONPATH": python_path,
        # A mutant is an edited source: the sources run, not extension modules compiled from the originals.
        "SONIC_PURE_PYTHON": "1",
        (RECORD_ENV if record else REPLAY_ENV): str(tape),
        SITES_ENV: str(report.with_suffix(".sites.json")),
    }
    if not record:
        env[REPORT_ENV] = str(report)
    command = [
        sys.executable,
        "-m",
        "pytest",
        *(tests or suite.split(",")),
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    ]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return -1
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout.decode(errors="replace")[-3000:])
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON result")
    parser.add_argument("--kinds", default="text,status", help="text, status or both (comma-separated)")
    parser.add_argument(
        "--only",
        default="",
        help="only these sites (comma-separated: a path, or a path:line for one site)",
    )
    parser.add_argument("--tape", type=Path, help="Triton's recorded answers (recorded first when absent)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="most seconds per suite run")
    parser.add_argument("--all", action="store_true", help="run the whole suite for every mutant")
    parser.add_argument(
        "--suite",
        default=SUITE,
        help="the test files to record, replay and mutate against (comma-separated; default: the folder)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sonic-mutants-"))
    # The whole src folder: the Python backend's triton_python_backend_utils must be this tree's too.
    shutil.copytree(
        SONIC_ROOT.parent, work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    copy = work / "src" / "sonic"
    tape = args.tape or work / "triton.jsonl"
    if not tape.exists():
        sys.stdout.write(f"recording Triton's answers to {tape}\n")
        rc = run_suite(
            str(SONIC_ROOT.parent),
            tape,
            work / "record",
            record=True,
            timeout_s=args.timeout_s,
            suite=args.suite,
        )
        if rc != 0:
            sys.stderr.write(f"the suite fails unmutated (exit {rc}): fix that first\n")
            return 1
    baseline = work / "baseline"
    rc = run_suite(str(copy.parent), tape, baseline, record=False, timeout_s=args.timeout_s, suite=args.suite)
    if rc != 0 or (baseline.exists() and baseline.read_text()):
        sys.stderr.write(f"the unmutated replay fails (exit {rc}): record the tape again\n")
        return 1
    reached = json.loads(baseline.with_suffix(".sites.json").read_text())["by_site"]
    tests_of = {s["id"]: s["tests"] for s in reached}
    results: list[dict[str, object]] = []
    # A part with a line (``protocol/dtypes.py:63``) names one site; a path, every site in it.
    parts = args.only.split(",")
    sites = [s for s in find_sites() if any(p == s.id if ":" in p else p in s.id for p in parts)]
    for site in sites:
        original = (SONIC_ROOT / site.path).read_text(encoding="utf-8")
        for kind in args.kinds.split(","):
            source = mutant_source(site, kind, original)
            if source is None:
                results.append(
                    {"site": site.id, "kind": kind, "result": "not mutable", "template": site.template}
                )
                continue
            tests = None if args.all else tests_of.get(site.id, [])
            if tests == []:
                results.append(
                    {"site": site.id, "kind": kind, "result": "not reached", "template": site.template}
                )
                continue
            (copy / site.path).write_text(source, encoding="utf-8")
            report = work / f"{site.id.replace('/', '_')}-{kind}.jsonl"
            started = time.monotonic()
            rc = run_suite(
                str(copy.parent),
                tape,
                report,
                record=False,
                timeout_s=args.timeout_s,
                tests=tests,
                suite=args.suite,
            )
            (copy / site.path).write_text(original, encoding="utf-8")
            differences = report.read_text().count("\n") if report.exists() else 0
            result = "killed" if differences or rc != 0 else "survived"
            row = {
                "site": site.id,
                "kind": kind,
                "result": result,
                "differences": differences,
                "exit": rc,
                "seconds": round(time.monotonic() - started, 1),
                "template": site.template,
            }
            results.append(row)
            sys.stdout.write(json.dumps(row) + "\n")
            sys.stdout.flush()
    tried = [r for r in results if r["result"] != "not mutable"]
    killed = [r for r in tried if r["result"] == "killed"]
    unreached = [r for r in tried if r["result"] == "not reached"]
    summary = {
        "mutants": len(tried),
        "killed": len(killed),
        "kill_rate": round(len(killed) / len(tried), 3) if tried else None,
        "not_reached": len(unreached),
        "survivors": [
            f"{r['kind']} {r['site']}: {r['template']}" for r in tried if r["result"] == "survived"
        ],
        "unreached": [f"{r['kind']} {r['site']}: {r['template']}" for r in unreached],
        "results": results,
    }
    args.out.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    sys.stdout.write(f"{len(killed)} of {len(tried)} mutants killed; {args.out}\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
