"""Scale-out: many client jobs as Dask tasks, each streaming events through a workflow.

Optional: ``pip install 'sonic-inference[dask]'``. A job is any picklable callable taking its
job number and returning a JSON-able dict (usually a :meth:`RunReport.summary` plus its start and
end times). Clients travel as configuration and connect lazily on each worker; jobs on the same
worker share one connection per configuration (:func:`sonic.workflow.dask_plugin.worker_inference`). With no scheduler
address a :class:`distributed.LocalCluster` is started for the call and closed after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self


def _distributed() -> Any:
    try:
        import distributed  # noqa: PLC0415
    except ImportError:
        msg = "Dask scale-out needs dask.distributed: pip install 'sonic-inference[dask]'"
        raise ImportError(msg) from None
    return distributed


@dataclass(frozen=True)
class DaskConfig:
    scheduler_address: str | None = None  # None: a LocalCluster for the call
    workers: int = 2  # LocalCluster worker processes
    threads_per_worker: int = 1  # LocalCluster: jobs one worker runs at once

    def __post_init__(self) -> None:
        if self.workers < 1 or self.threads_per_worker < 1:
            raise ValueError(
                f"workers and threads_per_worker must be >= 1, got {self.workers}, {self.threads_per_worker}"
            )


@dataclass(frozen=True)
class JobResults:
    results: tuple[dict[str, Any], ...]  # one per job, in job order, each with its worker
    wall_s: float


def timed_job(job: Callable[[int], dict[str, Any]], index: int) -> dict[str, Any]:
    """Runs on the worker: the job's result with its wall-clock start and end (for throughput)."""
    distributed = _distributed()
    started = time.time()
    result = dict(job(index))
    result.update(
        job=index,
        started_unix_s=started,
        finished_unix_s=time.time(),
        worker=distributed.get_worker().address,
    )
    return result


class DaskRunner:
    """A Dask client (and a LocalCluster when no address is given) for several rounds of jobs."""

    def __init__(self, config: DaskConfig) -> None:
        self.config = config
        self._cluster: Any = None
        self._client: Any = None

    def __enter__(self) -> Self:
        distributed = _distributed()
        try:
            if self.config.scheduler_address is None:
                self._cluster = distributed.LocalCluster(
                    n_workers=self.config.workers,
                    threads_per_worker=self.config.threads_per_worker,
                    processes=True,
                    dashboard_address=None,
                    # The scheduler's HTTP server (/metrics, /health) still starts without the dashboard;
                    # distributed < 2025.4 (coffea's pin) binds it to 8787 and warns when that is taken.
                    scheduler_kwargs={"dashboard_address": ":0"},
                )
                self._client = distributed.Client(self._cluster)
            else:
                self._client = distributed.Client(self.config.scheduler_address)
            from sonic.workflow.dask_plugin import SharedInference  # noqa: PLC0415  (needs distributed)

            self._client.register_plugin(SharedInference())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def run(self, job: Callable[[int], dict[str, Any]], count: int) -> JobResults:
        """Run ``job(0..count-1)`` as Dask tasks, all submitted at once; gather every result."""
        if self._client is None:
            msg = "DaskRunner is not open: use it as a context manager"
            raise RuntimeError(msg)
        start = time.perf_counter()
        # pure=False: identical arguments are still separate jobs.
        futures = [self._client.submit(timed_job, job, i, pure=False) for i in range(count)]
        results: list[dict[str, Any]] = self._client.gather(futures)
        return JobResults(tuple(results), time.perf_counter() - start)


def run_jobs(job: Callable[[int], dict[str, Any]], count: int, config: DaskConfig) -> JobResults:
    """One round of jobs on a runner opened and closed for it."""
    with DaskRunner(config) as runner:
        return runner.run(job, count)
