"""What the differential suite reached: each message site's hits, and Triton's answers kept for replay.

:class:`SiteHits` counts, for every site of :mod:`sites`, the cases whose sonic answer was worded there,
split by whether the message was *checked* (compared with Triton's: equal, or Triton's words found in
sonic's by a row that checks them), only its status was (two or more faults, or a row that accepts
other words), or it was *pinned*: a sonic-only case (a limit, a flag or a refusal Triton does not have)
asserted sonic's exact status and words. A site no case checks or pins is one whose wording could
change unnoticed. The conftest writes the
counts to ``SONIC_DIFFERENTIAL_SITES`` (JSON; default ``differential-sites.json`` under pytest's base
temporary folder) and prints a summary at the end of the session.

:class:`TritonTape` records Triton's outcome of every call (``SONIC_DIFFERENTIAL_RECORD=PATH``) and
replays it (``SONIC_DIFFERENTIAL_REPLAY=PATH``: Triton is not started), so a mutation run starts only
sonic for each mutant. A replayed call is matched by test and position, and checked against what was
recorded: a suite that generated other calls fails loudly rather than comparing with the wrong answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.differential.calls import Call, Outcome
from tests.integration.differential.sites import SiteTable, find_sites

SITES_ENV = "SONIC_DIFFERENTIAL_SITES"
RECORD_ENV = "SONIC_DIFFERENTIAL_RECORD"
REPLAY_ENV = "SONIC_DIFFERENTIAL_REPLAY"
OK_CODES = {"OK", "200"}
# Rows that compare sonic's words with Triton's (the rest accept another status or other words).
MESSAGE_ROWS = {"error-context", "input-list-order", "model-load-failure-text", "poll-failure-status"}
# Names that change from run to run (the shared-memory key holds the PID), left out of a call's digest.
VOLATILE = re.compile(rb"sonic_differential_\d+")


def checked(triton: Outcome, sonic: Outcome, row: str | None) -> bool:
    """Whether the comparison held sonic's message to Triton's."""
    same = triton.code == sonic.code and triton.message == sonic.message
    return same or row in MESSAGE_ROWS


@dataclass
class SiteHits:
    table: SiteTable = field(default_factory=lambda: SiteTable(find_sites()))
    checked: Counter[str] = field(default_factory=Counter)
    unchecked: Counter[str] = field(default_factory=Counter)
    unplaced: Counter[str] = field(default_factory=Counter)  # sonic's messages no site's words match
    pinned: Counter[str] = field(default_factory=Counter)  # sonic-only cases: exact status and words
    # site id: the tests whose cases may have reached it (every site whose words match a message: more
    # than reached it, so that a mutation run that runs only these tests misses none)
    tests: dict[str, set[str]] = field(default_factory=dict)

    def record(self, test: str, triton: Outcome, sonic: Outcome, row: str | None) -> None:
        if sonic.code in OK_CODES or not sonic.message:
            return
        sites = self.table.sites_of(sonic.message)
        if not sites:
            self.unplaced[sonic.message[:160]] += 1
        counter = self.checked if checked(triton, sonic, row) else self.unchecked
        for site in sites:
            counter[site.id] += 1
        for site in self.table.matching(sonic.message):
            self.tests.setdefault(site.id, set()).add(test)

    def pin(self, test: str, message: str) -> None:
        """A sonic-only case asserted ``message`` word for word (no Triton to compare with)."""
        sites = self.table.sites_of(message)
        if not sites:
            self.unplaced[message[:160]] += 1
        for site in sites:
            self.pinned[site.id] += 1
        for site in self.table.matching(message):
            self.tests.setdefault(site.id, set()).add(test)

    def report(self) -> dict[str, Any]:
        sites = [
            {
                **asdict(site),
                "id": site.id,
                "checked": self.checked[site.id],
                "unchecked": self.unchecked[site.id],
                "pinned": self.pinned[site.id],
                "tests": sorted(self.tests.get(site.id, ())),
            }
            for site in self.table.sites
        ]
        return {
            "sites": len(sites),
            "checked": sum(1 for s in sites if s["checked"]),
            "pinned": sum(1 for s in sites if s["pinned"] and not s["checked"]),
            "reached": sum(1 for s in sites if s["checked"] or s["unchecked"] or s["pinned"]),
            "by_site": sites,
            "unplaced_messages": dict(self.unplaced.most_common()),
        }


def steady(outcome: Outcome) -> Outcome:
    """``outcome`` with the names that change from run to run replaced, so that a replay compares."""
    text = VOLATILE.sub(b"sonic_differential_*", json.dumps(asdict(outcome)).encode()).decode()
    return Outcome(**json.loads(text))


def digest(call: Call) -> str:
    text = repr(call).encode()
    return hashlib.sha256(VOLATILE.sub(b"sonic_differential_*", text)).hexdigest()[:16]


class ReplayError(AssertionError):
    """The suite sent a call the recording does not hold where it was expected."""


@dataclass
class TritonTape:
    """Triton's outcomes by test and position: written while recording, read while replaying."""

    path: Path
    replaying: bool
    outcomes: dict[tuple[str, int], tuple[str, dict[str, Any]]] = field(default_factory=dict)
    positions: Counter[str] = field(default_factory=Counter)

    @classmethod
    def open(cls, path: Path, *, replaying: bool) -> TritonTape:
        tape = cls(path, replaying)
        if replaying:
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                tape.outcomes[(row["test"], row["position"])] = (row["digest"], row["outcome"])
        else:
            path.write_text("", encoding="utf-8")
        return tape

    def next_position(self, test: str) -> int:
        position = self.positions[test]
        self.positions[test] += 1
        return position

    def replay(self, test: str, call: Call) -> Outcome:
        position = self.next_position(test)
        recorded = self.outcomes.get((test, position))
        if recorded is None or recorded[0] != digest(call):
            raise ReplayError(f"{test} call {position} is not the recorded one: {call.what or call!r}")
        return Outcome(**recorded[1])

    def write(self, test: str, call: Call, outcome: Outcome) -> None:
        row = {
            "test": test,
            "position": self.next_position(test),
            "digest": digest(call),
            "outcome": asdict(outcome),
        }
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
