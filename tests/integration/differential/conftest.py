"""Both servers, started once per module on the same model repository: real Triton 2.51 and ``sonic serve``.

Triton is the ``tritonserver`` binary in the nvidia-pytriton wheel with its Python backend on CPU;
without it the differential tests are skipped. Both run in explicit model-control mode with every
model loaded at start, so the model-control cases can load and unload the ``spare`` model.

The session's :class:`~tests.integration.differential.compare.Session` counts the message sites the
cases reach (written as JSON at the end, a one-line summary printed) and, where asked, records or
replays Triton's answers (:mod:`~tests.integration.differential.reach`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from tests.integration.differential.calls import Pair
from tests.integration.differential.compare import Both, Session
from tests.integration.differential.reach import RECORD_ENV, REPLAY_ENV, SITES_ENV, TritonTape
from tests.integration.differential.repository import MODELS, write_repository
from tests.integration.differential.servers import both_of, start_pair

SESSION = pytest.StashKey[Session]()
SITES_PATH = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def differential_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    record, replay = os.environ.get(RECORD_ENV), os.environ.get(REPLAY_ENV)
    tape = None
    if replay:
        tape = TritonTape.open(Path(replay), replaying=True)
    elif record:
        tape = TritonTape.open(Path(record), replaying=False)
    session = Session(tape=tape)
    request.config.stash[SESSION] = session
    yield session
    path = Path(os.environ.get(SITES_ENV) or tmp_path_factory.getbasetemp() / "differential-sites.json")
    path.write_text(json.dumps(session.hits.report(), indent=1), encoding="utf-8")
    request.config.stash[SITES_PATH] = path


@pytest.fixture(autouse=True)
def _current_test(differential_session: Session, request: pytest.FixtureRequest) -> None:
    differential_session.test = request.node.nodeid


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, differential_session: Session) -> Iterator[Pair]:
    repository = write_repository(tmp_path_factory.mktemp("differential") / "models")
    with ExitStack() as stack:
        yield start_pair(
            stack, repository, [m.name for m in MODELS], replaying=differential_session.replaying
        )


@pytest.fixture(scope="module")
def both(pair: Pair, differential_session: Session) -> Iterator[Both]:
    callers = both_of(pair, differential_session)
    try:
        yield callers
    finally:
        callers.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is None:
        return
    report = session.hits.report()
    terminalreporter.write_line(
        f"differential: {report['checked']} of {report['sites']} message sites checked against Triton's "
        f"words, {report['pinned']} more pinned to sonic's own, {report['reached']} reached; per site: "
        f"{config.stash.get(SITES_PATH, '(not written)')}"
    )
