"""Event-processing workflows whose ML modules run in-process ("direct") or through the service.

A workflow is a path of modules run on every event. Plain :class:`CpuModule` objects do their
work in ``process``; a :class:`SonicModule` splits its work as CMSSW's ExternalWork modules do:
``acquire`` builds the model inputs and returns at once, the framework sends them, other streams
keep the CPU busy meanwhile, and ``produce`` takes the outputs when they arrive. The
:class:`Scheduler` runs N event streams concurrently. :class:`InferenceConfig` is the one switch
between :class:`DirectInference` (the server's own backends, loaded in this process, no sockets)
and :class:`ServiceInference` (a SONIC/Triton server); outputs are identical either way.

- :mod:`.module` (the modules), :mod:`.event` (one event), :mod:`.scheduler` (N streams), :mod:`.inference`
  (the switch), :mod:`.report` (timings), :mod:`.work` (emulated CPU work);
- events in and out: :mod:`.sources` (synthetic generators), :mod:`.io` (ROOT in, ROOT or Parquet out);
- scale-out: :mod:`.dask` (client jobs as Dask tasks), :mod:`.dask_plugin` (per-worker shared inference).
"""

from sonic.workflow.event import Event
from sonic.workflow.inference import (
    DirectInference,
    Inference,
    InferenceConfig,
    InferenceMode,
    ServerStats,
    ServiceInference,
    open_inference,
)
from sonic.workflow.module import CpuModule, OutputCollector, SonicModule
from sonic.workflow.report import EventRecord, ModuleTiming, RunReport
from sonic.workflow.scheduler import Scheduler
from sonic.workflow.sources import SyntheticSource
from sonic.workflow.work import CpuWork

__all__ = [
    "CpuModule",
    "CpuWork",
    "DirectInference",
    "Event",
    "EventRecord",
    "Inference",
    "InferenceConfig",
    "InferenceMode",
    "ModuleTiming",
    "OutputCollector",
    "RunReport",
    "Scheduler",
    "ServerStats",
    "ServiceInference",
    "SonicModule",
    "SyntheticSource",
    "open_inference",
]
