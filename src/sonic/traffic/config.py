"""What to record and how much (no pyarrow here: the server's configuration imports it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TrafficLogConfig:
    """Where and how much to record (``sonic serve --traffic-log DIR`` and its ``--traffic-log-*`` options)."""

    directory: Path
    enabled: bool = True  # False: off until the log-settings API turns it on
    max_file_bytes: int = 64 << 20
    max_file_age_s: float = 300.0  # a file becomes readable when closed: at most this old
    max_total_bytes: int = 1 << 30
    flush_interval_s: float = 1.0
    max_pending_records: int = 100_000
    sample_contents_every: int = 0  # keep the input bytes of every N-th request; 0: never
    max_contents_bytes: int = 1 << 20  # a request with more input bytes is recorded without them
    max_pending_contents_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name in ("max_file_bytes", "max_total_bytes", "max_pending_records", "max_contents_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"traffic log: {name} must be > 0, got {getattr(self, name)}")
        if self.max_file_age_s <= 0 or self.flush_interval_s <= 0:
            msg = "traffic log: max_file_age_s and flush_interval_s must be > 0"
            raise ValueError(msg)
        if self.sample_contents_every < 0:
            raise ValueError(
                f"traffic log: sample_contents_every must be >= 0, got {self.sample_contents_every}"
            )
