"""SONIC client: send named numpy inputs to whichever server has the model, asynchronously, with retries.

>>> from sonic.client import SyncClient
>>> with SyncClient.from_env("emtrk_michel") as client:  # doctest: +SKIP
...     out = client.infer({"main_input": x})

- :mod:`.client` (:class:`AsyncClient`), :mod:`.sync` (blocking and futures wrappers), :mod:`.blocking` (the
  blocking call's fast path), :mod:`.config` (frozen :class:`ClientConfig`), :mod:`.errors`, :mod:`.results`
  (what a call returns), :mod:`.stats`;
- one call: :mod:`.batching` (inputs checked, batches split and joined), :mod:`.plans` (a checked signature's
  short path), :mod:`.coalesce` (opt-in client-side batching), :mod:`.inflight` (the bound on requests in
  flight), :mod:`.retries` (retries and failover), :mod:`.tries` (one try on one server);
- servers: :mod:`.registry` (servers, their models, the next choice), :mod:`.health` (health states and the
  probing task), :mod:`.checksum` (model version check), :mod:`.fallback` (the local fallback server);
- shared memory: :mod:`.shm`, :mod:`.zerocopy`, :mod:`.cleanup` (segments unlinked at exit and on signals);
- :mod:`.transport`: one module per transport behind one interface.
"""

from sonic.client.client import AsyncClient, ClientState
from sonic.client.config import (
    ClientConfig,
    Compression,
    Device,
    FallbackConfig,
    FallbackServerKind,
    SharedMemoryMode,
    TlsConfig,
    TransportKind,
)
from sonic.client.errors import (
    ClientError,
    ClientStateError,
    ConnectionLostError,
    DeadlineExceededError,
    DrainedError,
    InputError,
    InvalidRequestError,
    ModelVersionError,
    NoServerError,
    RetriesExhaustedError,
    ServerError,
    TransientError,
)
from sonic.client.health import Health
from sonic.client.results import CallTiming, InferResult
from sonic.client.stats import ClientStatistics
from sonic.client.sync import SyncClient
from sonic.client.zerocopy import ShmRequest

__all__ = [
    "AsyncClient",
    "CallTiming",
    "ClientConfig",
    "ClientError",
    "ClientState",
    "ClientStateError",
    "ClientStatistics",
    "Compression",
    "ConnectionLostError",
    "DeadlineExceededError",
    "Device",
    "DrainedError",
    "FallbackConfig",
    "FallbackServerKind",
    "Health",
    "InferResult",
    "InputError",
    "InvalidRequestError",
    "ModelVersionError",
    "NoServerError",
    "RetriesExhaustedError",
    "ServerError",
    "SharedMemoryMode",
    "ShmRequest",
    "SyncClient",
    "TlsConfig",
    "TransientError",
    "TransportKind",
]
