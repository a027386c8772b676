"""Per-worker shared inference for Dask jobs (imported only with dask.distributed installed).

gRPC's asyncio layer serves one event loop per process well; jobs that each opened their own loop
and closed it again left gRPC callbacks aimed at closed loops. So all jobs of one worker process
share one :class:`ServiceInference` per client configuration, like the streams of one CMSSW
process, and the worker closes them when it shuts down.
"""

from __future__ import annotations

import threading
from typing import Any

from distributed import WorkerPlugin, get_worker

from sonic.client.config import ClientConfig
from sonic.workflow.inference import ServiceInference

PLUGIN_NAME = "sonic-inference"


class SharedInference(WorkerPlugin):
    name = PLUGIN_NAME

    # The plugin object is pickled to the workers: its state is made there, in setup().
    def setup(self, worker: Any) -> None:
        del worker
        self._shared: dict[ClientConfig, ServiceInference] = {}
        self._lock = threading.Lock()

    def get(self, config: ClientConfig) -> ServiceInference:
        with self._lock:
            inference = self._shared.get(config)
            if inference is None:
                inference = self._shared[config] = ServiceInference(config)
            return inference

    def teardown(self, worker: Any) -> None:
        del worker
        with self._lock:
            shared, self._shared = list(self._shared.values()), {}
        for inference in shared:
            inference.close()


def worker_inference(config: ClientConfig) -> ServiceInference:
    """This worker's shared inference for ``config`` (the plugin is registered by :class:`DaskRunner`)."""
    plugin = get_worker().plugins.get(PLUGIN_NAME)
    if not isinstance(plugin, SharedInference):
        msg = "no sonic inference plugin on this worker: run jobs through sonic.workflow.dask.DaskRunner"
        raise RuntimeError(msg)  # noqa: TRY004  (a missing set-up step, not a wrong argument type)
    return plugin.get(config)
