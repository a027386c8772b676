"""One comparison: a call sent to Triton (or read from a recording) and to sonic, the difference judged.

Shared by every differential test module: :class:`Both` holds the two callers of one server pair and the
session's :class:`Session` (site hits, the Triton recording, the test now running), and :func:`budget`
is the example count every test runs with.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from tests.integration.differential.calls import Call, Caller, Outcome
from tests.integration.differential.intended import explain
from tests.integration.differential.reach import SiteHits, TritonTape, steady

EXAMPLES_ENV = "SONIC_DIFFERENTIAL_EXAMPLES"
REPORT_ENV = "SONIC_DIFFERENTIAL_REPORT"


def budget(ci_examples: int) -> settings:
    """CI: ``ci_examples``, derandomized (the same cases every run); people: the env var's count, random."""
    chosen = int(os.environ.get(EXAMPLES_ENV, "0"))
    return settings(
        max_examples=chosen or ci_examples,
        derandomize=not chosen,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@dataclass
class Session:
    """What the differential tests of one pytest session share."""

    hits: SiteHits = field(default_factory=SiteHits, repr=False)
    tape: TritonTape | None = field(default=None, repr=False)  # recording or replaying Triton's answers
    test: str = ""  # the node id of the test now running

    @property
    def replaying(self) -> bool:
        return self.tape is not None and self.tape.replaying


@dataclass
class Both:
    triton: Caller | None  # None while replaying a recording
    sonic: Caller
    session: Session

    def _triton(self, call: Call) -> Outcome:
        tape = self.session.tape
        if tape is not None and tape.replaying:
            return tape.replay(self.session.test, call)
        assert self.triton is not None
        outcome = self.triton(call)
        if tape is not None:
            tape.write(self.session.test, call, outcome)
        return outcome

    def compare(self, call: Call, sonic_says: tuple[str, str] | None = None) -> Outcome:
        """Send ``call`` to both; fail on a difference no intended row explains. Returns Triton's outcome.

        ``sonic_says``: sonic's exact status and words for this single-fault call, asserted beside the
        comparison where a row lets sonic answer other words or status than Triton's (or Triton's words
        with sonic's after them): what a row cannot hold to Triton's is then held to sonic's own."""
        triton, sonic = self._triton(call), self.sonic(call)
        if self.session.tape is not None:
            triton, sonic = steady(triton), steady(sonic)
        row = None if triton == sonic else explain(call, triton, sonic)
        self.session.hits.record(self.session.test, triton, sonic, row)
        if triton != sonic and row is None:
            report = os.environ.get(REPORT_ENV)
            record = {"call": call.what or repr(call), "triton": repr(triton), "sonic": repr(sonic)}
            if not report:
                pytest.fail("sonic differs from Triton:\n" + json.dumps(record, indent=1))
            with Path(report).open("a") as file:
                file.write(json.dumps({"test": self.session.test, **record}) + "\n")
        if sonic_says is not None:
            code, words = sonic_says
            # Names that change from run to run (a shared-memory key's PID) as a replay sees them.
            self.pinned(steady(sonic), code, steady(Outcome(code, words)).message)
        return triton

    def expect(self, call: Call, code: str, message: str) -> None:
        """A sonic-only case (a limit, a flag, a refusal Triton does not have): sonic must answer
        ``code`` and exactly ``message``; its site counts as reached (pinned), not as checked."""
        self.pinned(self.sonic(call), code, message)

    def pinned(self, outcome: Outcome, code: str, message: str) -> None:
        """``outcome`` (of a call sonic alone answered) must be ``code`` with exactly ``message``."""
        self.session.hits.pin(self.session.test, outcome.message)
        if (outcome.code, outcome.message) != (code, message):
            pytest.fail(f"sonic answered {outcome.code} {outcome.message!r}, expected {code} {message!r}")

    def close(self) -> None:
        if self.triton is not None:
            self.triton.close()
        self.sonic.close()
