"""``triton_wrapper``: coffea's Triton wrapper, on :mod:`sonic.client`.

Same constructor, URL form (``triton+grpc://host:port/model/version``), ``prepare_awkward`` /
``postprocess_awkward`` hooks, eager awkward and lazy dask-awkward use (coffea's own
``numpy_call_wrapper`` does the awkward and dask parts). What changes underneath:

- requests go through :class:`sonic.client.SyncClient`: retries with backoff, and failover when the URL
  names several servers (``triton+grpc://a:8001,b:8001/model/1``);
- arrays are cut into chunks of the server's largest preferred batch size, or the model's
  ``max_batch_size`` when the config has none (``dynamic_batching { }`` included, where coffea raises
  ``KeyError: 'preferred_batch_size'``), never padded; the chunks go out concurrently;
- pickling keeps the configuration only, and every process (a Dask worker) connects on first use.

``client_args`` takes tritonclient's TLS arguments (``ssl``, ``root_certificates``, ``private_key``,
``certificate_chain``; ``ssl`` defaults to True for gRPC, as in coffea) and any
:class:`sonic.client.ClientConfig` field (``timeout_s``, ``allowed_tries``, ...).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from coffea.ml_tools.helper import numpy_call_wrapper

from sonic.client import ClientConfig, SyncClient, TlsConfig

TLS_ARGS = ("root_certificates", "private_key", "certificate_chain")
IGNORED_ARGS = ("verbose", "concurrency")  # tritonclient's logging and HTTP pool: nothing to do here
SCHEME = "triton+grpc"


def parse_url(model_url: str) -> tuple[tuple[str, ...], str, str]:
    """``triton+grpc://host:port[,host:port...]/model/version`` -> (servers, model, version)."""
    scheme, sep, location = model_url.partition("://")
    parts = location.split("/")
    if not sep or len(parts) != 3 or not all(parts):
        raise ValueError(f"model URL '{model_url}': expected {SCHEME}://host:port/model/version")
    if scheme != SCHEME:
        raise ValueError(
            f"model URL '{model_url}': protocol '{scheme}' is not supported; sonic.coffea speaks gRPC "
            f"({SCHEME}://host:port/model/version)"
        )
    return tuple(parts[0].split(",")), parts[1], parts[2]


def client_config(servers: tuple[str, ...], client_args: Mapping[str, Any] | None) -> ClientConfig:
    """The :class:`ClientConfig` for ``servers`` and coffea-style ``client_args``."""
    args = dict(client_args or {})
    for name in IGNORED_ARGS:
        args.pop(name, None)
    ssl = bool(args.pop("ssl", True))
    tls_paths = {name: Path(args.pop(name)) for name in TLS_ARGS if args.get(name) is not None}
    known = {f.name for f in fields(ClientConfig)} - {"servers", "tls"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(
            f"client_args {unknown} not understood; expected ssl, {', '.join(TLS_ARGS)} or ClientConfig "
            f"fields {sorted(known)}"
        )
    tls = TlsConfig(**tls_paths) if ssl or tls_paths else None
    return ClientConfig(servers=servers, tls=tls, **args)


def chunk_size(config: Mapping[str, Any], fallback: int) -> int:
    """Rows per request from a model config (as JSON): largest preferred batch size, else max_batch_size.

    ``fallback`` when the model does not batch (``max_batch_size`` 0 or absent).
    """
    preferred = [int(v) for v in config.get("dynamic_batching", {}).get("preferred_batch_size", [])]
    max_batch = int(config.get("max_batch_size", 0))
    if preferred:
        return min(max(preferred), max_batch) if max_batch > 0 else max(preferred)
    return max_batch if max_batch > 0 else fallback


class triton_wrapper(numpy_call_wrapper):  # type: ignore[misc]  # coffea is untyped; its name, kept
    """Drop-in for ``coffea.ml_tools.triton_wrapper``; subclass it and override ``prepare_awkward``.

    ``batch_size`` > 0 sets the rows per request; -1 (default) asks the server's model config.
    """

    batch_size_fallback = 10  # rows per request for a model without a batch dimension in its config

    def __init__(self, model_url: str, client_args: dict[str, Any] | None = None, batch_size: int = -1):
        super().__init__()
        self.model_url, self._client_args, self._batch_size = model_url, client_args, batch_size
        self.servers, self.model, self.version = parse_url(model_url)
        self._config = client_config(self.servers, client_args)
        self._client: SyncClient | None = None

    # --- pickling: configuration only; each process connects on first use --------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in {"_client", "_delayed_wrapper"}}
        state["_client"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def client(self) -> SyncClient:
        if self._client is None:
            self._client = SyncClient(self.model, self._config, version=self.version)
        return self._client

    def close(self) -> None:
        """Closes this process's connections (another call reconnects)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def batch_size(self) -> int:
        """Rows per request: as given, else the server's preferred batch size or max_batch_size."""
        if self._batch_size < 0:
            self._batch_size = chunk_size(self._model_config(), self.batch_size_fallback)
        return self._batch_size

    def _model_config(self) -> dict[str, Any]:
        """The model's config as Triton's JSON, from the first server that answers."""
        import tritonclient.grpc  # noqa: PLC0415  (tritonclient's protobuf modules come with sonic)

        tls = self._config.tls
        errors = []
        for address in self.servers:
            kwargs: dict[str, Any] = {"ssl": tls is not None}
            if tls is not None:
                kwargs.update({name: str(getattr(tls, name)) for name in TLS_ARGS if getattr(tls, name)})
            client = tritonclient.grpc.InferenceServerClient(address, **kwargs)
            try:
                config: dict[str, Any] = client.get_model_config(self.model, self.version, as_json=True)
                return dict(config["config"])
            except tritonclient.grpc.InferenceServerException as exc:
                errors.append(f"{address}: {exc}")
            finally:
                client.close()
        raise ConnectionError(f"model '{self.model}' version '{self.version}' config: {'; '.join(errors)}")

    # --- numpy level: checks, then chunks sent concurrently -------------------------------------------

    def validate_numpy_input(self, output_list: list[str], input_dict: dict[str, npt.NDArray[Any]]) -> None:
        """Names, ranks, fixed dims and requested outputs against the model's metadata, as coffea checks."""
        info = self.client.model_info()
        batched = info.max_batch_size > 0
        specs = {spec.name: spec for spec in info.inputs}
        for name, array in input_dict.items():
            if name not in specs:
                raise ValueError(f"Input [{name}] not defined in model '{self.model}'! Inputs: {list(specs)}")
            expected = (-1, *specs[name].dims) if batched else specs[name].dims
            if array.ndim != len(expected) or any(
                e >= 0 and e != g for e, g in zip(expected, array.shape, strict=True)
            ):
                raise ValueError(
                    f"Input [{name}] of model '{self.model}' got shape {array.shape} (expected {expected}, "
                    "-1 means any)"
                )
        missing = sorted(set(specs) - set(input_dict))
        if missing:
            raise ValueError(f"Inputs {missing} of model '{self.model}' not given in input dictionary!")
        outputs = {spec.name for spec in info.outputs}
        unknown = [name for name in output_list if name not in outputs]
        if unknown:
            raise ValueError(
                f"Requested outputs {unknown} not defined by model '{self.model}' ({sorted(outputs)})"
            )

    def numpy_call(
        self, output_list: list[str], input_dict: dict[str, npt.NDArray[Any]]
    ) -> dict[str, npt.NDArray[Any]]:
        """The outputs named in ``output_list`` for ``input_dict``, in chunks of :attr:`batch_size` rows."""
        info = self.client.model_info()
        arrays = {name: self._as_model_dtype(name, array, info) for name, array in input_dict.items()}
        rows = next(iter(arrays.values())).shape[0] if arrays else 0
        if info.max_batch_size <= 0 or rows <= self.batch_size:
            return dict(self.client.infer(arrays, output_list))
        chunks = [
            {name: array[start : start + self.batch_size] for name, array in arrays.items()}
            for start in range(0, rows, self.batch_size)
        ]
        # Concurrent requests, results in order; the client's retries and failover apply to each.
        parts = self.client.infer_ragged(chunks, output_list)
        return {name: np.concatenate([part[name] for part in parts]) for name in output_list}

    def _as_model_dtype(self, name: str, array: npt.NDArray[Any], info: Any) -> npt.NDArray[Any]:
        import tritonclient.utils  # noqa: PLC0415

        datatype = next((spec.datatype for spec in info.inputs if spec.name == name), None)
        if datatype is None or datatype == "BYTES":
            return array
        expected = np.dtype(tritonclient.utils.triton_to_np_dtype(datatype))
        if array.dtype != expected:
            warnings.warn(
                f"Input [{name}] got array of type [{array.dtype}] (Expected [{expected}]). Automatic "
                "conversion will be performed using numpy.array.astype.",
                UserWarning,
                stacklevel=3,
            )
            return array.astype(expected)
        return np.ascontiguousarray(array)
