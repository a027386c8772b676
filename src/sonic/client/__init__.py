"""SONIC client: send named numpy inputs to whichever server has the model, asynchronously, with retries.

>>> from sonic.client import SyncClient
>>> with SyncClient.from_env("emtrk_michel") as client:  # doctest: +SKIP
...     out = client.infer({"main_input": x})
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
