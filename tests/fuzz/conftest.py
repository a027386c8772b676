"""Hypothesis profiles of the fuzz tests: a fixed, seeded budget for every CI run, a long one for hunting.

- ``ci`` (the default, what ``pytest`` and ``./dev test`` run): derandomized (the same examples every run,
  so a CI failure reproduces with the same command), no example database written, each test's examples
  capped so the whole folder takes well under a minute on two cores.
- ``long`` (``./dev fuzz``, or ``HYPOTHESIS_PROFILE=long``): random seeds, 50 times the examples (or
  ``SONIC_FUZZ_EXAMPLES`` per test), failures saved under ``.hypothesis/`` (git-ignored) and replayed
  first on the next run; hypothesis prints the seed and a ``@reproduce_failure`` blob for each failure.

Each example must finish within ``deadline`` (decoders are bounded in time, not only in memory); the
deadline is generous because the machine running CI is shared.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

CI_EXAMPLES = 100
LONG_EXAMPLES = int(os.environ.get("SONIC_FUZZ_EXAMPLES", 50 * CI_EXAMPLES))
DEADLINE = timedelta(seconds=2)

settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=DEADLINE,
    print_blob=True,
    # Building mutated valid messages is slower than drawing plain values; the budget is examples, not time.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=LONG_EXAMPLES,
    derandomize=False,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    deadline=DEADLINE,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
