"""What one client met: tries, retries and why, for a job's summary (``AsyncClient.statistics``)."""

from __future__ import annotations

from dataclasses import dataclass

from sonic.client.errors import (
    ClientError,
    ConnectionLostError,
    DeadlineExceededError,
    DrainedError,
    UnavailableError,
)

# What a draining server answers a call it no longer takes (sonic serve and Triton).
_DRAINING_MARKERS = ("shutting down", "not accepting", "going away")


@dataclass
class ClientStatistics:
    """Counters since the client was made; every field counts calls on the wire (parts of a split batch)."""

    succeeded: int = 0  # answered
    failed: int = 0  # every allowed try failed
    retried: int = 0  # answered, but not at the first try
    failed_tries: int = 0  # tries that failed with a transient error (each retried or counted in failed)
    deadline_exceeded: int = 0  # tries past their deadline
    connection_lost: int = 0  # tries whose connection broke (keepalive failures included)
    drained: int = 0  # tries a draining server refused or cut off at its exit timeout
    model_moved: int = 0  # tries on a server that no longer had the model (its list was refreshed)

    def count_success(self, tries: int) -> None:
        self.succeeded += 1
        self.retried += tries > 1

    def count_failure(self, error: ClientError, *, moved: bool) -> None:
        self.failed_tries += 1
        self.model_moved += moved
        self.deadline_exceeded += isinstance(error, DeadlineExceededError)
        self.connection_lost += isinstance(error, ConnectionLostError)
        text = str(error).lower()
        self.drained += isinstance(error, DrainedError) or (
            isinstance(error, UnavailableError) and any(m in text for m in _DRAINING_MARKERS)
        )
