"""Where ``sonic validate`` sends requests: any KServe v2 server over gRPC or HTTP, or a model repository
run in this process.

A target is written ``[grpc://]HOST:PORT[/MODEL[:VERSION]]``, ``http://HOST:PORT[/MODEL[:VERSION]]`` or
``direct:REPOSITORY[/MODEL[:VERSION]]`` (``direct:`` runs the repository with ``sonic serve``'s model
manager and data plane, without sockets). Without a model, each request goes to the model it was
recorded for; without a version, to the version the server's policy picks.

gRPC goes through :mod:`sonic.client`'s transports (``native`` or ``grpcio``); HTTP sends KServe v2 JSON
with binary tensors (aiohttp); ``direct`` decodes the same gRPC message the network targets would be
sent. Each answer becomes a :class:`~sonic.validate.compare.Answer`: outputs as arrays, or the status
and message of the error.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sonic.client.config import ClientConfig, TransportKind
from sonic.client.errors import ClientError, ServerError
from sonic.client.transport.factory import open_transport
from sonic.protocol import dtypes
from sonic.protocol.errors import GrpcCode, SonicError, http_status, status_of
from sonic.protocol.grpc_codec import decode_infer_request, encode_request, split_response
from sonic.protocol.model_config import CONFIG_FILENAME
from sonic.protocol.types import ParameterValue, WireInput, WireRequest
from sonic.validate.compare import Answer, Tensor

# The caller's deadline (sonic.validate.run) ends a request; the transport's own, a little later, only
# closes what is left. A DEADLINE_EXCEEDED answer is then the server's, never the client's own deadline.
TRANSPORT_GRACE_S = 1.0


class Scheme(enum.StrEnum):
    GRPC = "grpc"
    HTTP = "http"
    DIRECT = "direct"


@dataclass(frozen=True)
class TargetSpec:
    """A parsed target: how to reach it, and which model and version requests go to (empty: as recorded)."""

    protocol: Scheme
    address: str  # HOST:PORT, or the repository for DIRECT
    model: str = ""
    version: str = ""

    @classmethod
    def parse(cls, text: str) -> TargetSpec:
        if text.startswith("direct:"):
            return cls._direct(text.removeprefix("direct:"))
        protocol = Scheme.GRPC
        for scheme in ("grpc://", "http://"):
            if text.startswith(scheme):
                protocol, text = Scheme(scheme.removesuffix("://")), text.removeprefix(scheme)
        address, _, model_part = text.partition("/")
        if not address or ":" not in address:
            raise ValueError(f"target '{text}': expected HOST:PORT[/MODEL[:VERSION]]")
        model, _, version = model_part.partition(":")
        return cls(protocol, address, model, _checked_version(version, text))

    @classmethod
    def _direct(cls, text: str) -> TargetSpec:
        path_text, version = text, ""
        head, sep, tail = text.rpartition(":")
        if sep and tail.isdigit() and "/" not in tail:
            path_text, version = head, tail
        path = Path(path_text)
        if (path / CONFIG_FILENAME).is_file() or any(p.name.isdigit() for p in _subfolders(path)):
            return cls(Scheme.DIRECT, str(path.parent), path.name, version)  # a model's folder
        if version:
            raise ValueError(
                f"target 'direct:{text}': a version needs a model folder (direct:REPO/MODEL:VERSION)"
            )
        if not path.is_dir():
            raise ValueError(f"target 'direct:{text}': {path} is not a model repository (no such folder)")
        return cls(Scheme.DIRECT, str(path))

    def __str__(self) -> str:
        model = f"/{self.model}" + (f":{self.version}" if self.version else "") if self.model else ""
        prefix = "direct:" if self.protocol is Scheme.DIRECT else f"{self.protocol}://"
        return f"{prefix}{self.address}{model}"


def _subfolders(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []


def _checked_version(version: str, text: str) -> str:
    if version and not version.isdigit():
        raise ValueError(f"target '{text}': a version is a positive integer, got '{version}'")
    return version


@dataclass(frozen=True)
class Call:
    """One request as a target sends it (names already those of the target's model)."""

    model: str
    version: str
    request_id: str
    arrays: Mapping[str, npt.NDArray[Any]]
    datatypes: Mapping[str, str]
    parameters: Mapping[str, ParameterValue]

    def wire(self) -> WireRequest:
        inputs = []
        for name, array in self.arrays.items():
            datatype = dtypes.from_name(self.datatypes[name])
            data = dtypes.array_to_bytes(np.ascontiguousarray(array), datatype)
            inputs.append(WireInput(name, datatype.name, tuple(array.shape), data))
        return WireRequest(
            self.model, self.version, tuple(inputs), request_id=self.request_id, parameters=self.parameters
        )


class Target(Protocol):
    async def infer(self, call: Call, timeout_s: float) -> Answer: ...

    async def close(self) -> None: ...


def _tensor(name: str, datatype: str, shape: tuple[int, ...], data: bytes | memoryview, model: str) -> Tensor:
    where = f"output '{name}' of model '{model}'"
    array = dtypes.array_from_bytes(data, dtypes.from_name(datatype), shape, where)
    return Tensor(datatype, shape, array)


def grpc_error(code: GrpcCode, message: str) -> Answer:
    http = status_of(code).http
    return Answer(code.name, int(http) if http is not None else 0, message)


class GrpcTarget:
    """A server over gRPC, through :mod:`sonic.client`'s transport ``kind``."""

    def __init__(self, address: str, kind: TransportKind, timeout_s: float) -> None:
        config = ClientConfig(transport=kind, timeout_s=timeout_s, control_timeout_s=timeout_s)
        self._transport = open_transport(address, config)

    async def infer(self, call: Call, timeout_s: float) -> Answer:
        head, tail = encode_request(call.wire())
        message = b"".join([head.SerializeToString(), *tail])
        try:
            data = await self._transport.raw_call("ModelInfer", message, timeout_s + TRANSPORT_GRACE_S)
        except ServerError as exc:
            return grpc_error(exc.status, exc.detail)
        except ClientError as exc:
            return Answer("CLIENT ERROR", 0, str(exc))
        response, raw = split_response(data)
        outputs = {
            o.name: _tensor(o.name, o.datatype, tuple(o.shape), raw[i] if i < len(raw) else b"", call.model)
            for i, o in enumerate(response.outputs)
        }
        return Answer("OK", 200, outputs=outputs)

    async def close(self) -> None:
        await self._transport.close()


class HttpTarget:
    """A server over HTTP/REST: KServe v2 JSON with Triton's binary tensor extension, outputs binary."""

    def __init__(self, address: str) -> None:
        import aiohttp  # noqa: PLC0415  (only an HTTP target needs it)

        self._base = f"http://{address}"
        self._session = aiohttp.ClientSession()

    async def infer(self, call: Call, timeout_s: float) -> Answer:
        import aiohttp  # noqa: PLC0415

        request = call.wire()
        pieces: list[bytes | memoryview] = []
        inputs = []
        for tensor in request.inputs:
            assert tensor.data is not None
            pieces.append(tensor.data)
            inputs.append({
                "name": tensor.name,
                "datatype": tensor.datatype,
                "shape": list(tensor.shape),
                "parameters": {"binary_data_size": len(tensor.data)},
            })  # fmt: skip
        header: dict[str, Any] = {
            "inputs": inputs,
            "parameters": {**call.parameters, "binary_data_output": True},
        }
        if call.request_id:
            header["id"] = call.request_id
        head = json.dumps(header).encode()
        path = f"/v2/models/{call.model}" + (f"/versions/{call.version}" if call.version else "") + "/infer"
        headers = {
            "Inference-Header-Content-Length": str(len(head)),
            "Content-Type": "application/octet-stream",
        }
        try:
            async with self._session.post(
                self._base + path,
                data=b"".join([head, *pieces]),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s + TRANSPORT_GRACE_S),
            ) as response:
                body = await response.read()
                length = response.headers.get("Inference-Header-Content-Length")
        except aiohttp.ClientError as exc:
            return Answer("CLIENT ERROR", 0, f"{type(exc).__name__}: {exc}")
        if response.status != 200:
            try:
                message = str(json.loads(body).get("error", ""))
            except (ValueError, AttributeError):
                message = body.decode(errors="replace")
            return Answer(f"HTTP {response.status}", response.status, message)
        return Answer(
            "OK", 200, outputs=_http_outputs(body, None if length is None else int(length), call.model)
        )

    async def close(self) -> None:
        await self._session.close()


def _http_outputs(body: bytes, header_length: int | None, model: str) -> dict[str, Tensor]:
    end = len(body) if header_length is None else header_length
    header = json.loads(body[:end])
    view, offset = memoryview(body), end
    outputs = {}
    for output in header.get("outputs", []):
        name, datatype, shape = output["name"], output["datatype"], tuple(output["shape"])
        size = output.get("parameters", {}).get("binary_data_size")
        if size is not None:
            outputs[name] = _tensor(name, datatype, shape, view[offset : offset + size], model)
            offset += size
            continue
        numpy_type = dtypes.from_name(datatype).numpy
        values = output["data"]
        if datatype == "BYTES":
            values = [v.encode() if isinstance(v, str) else v for v in values]
        outputs[name] = Tensor(datatype, shape, np.array(values, dtype=numpy_type).reshape(shape))
    return outputs


class DirectTarget:
    """A model repository run in this process by ``sonic serve``'s model manager and data plane."""

    def __init__(self, repository: Path) -> None:
        from sonic.server.config import ServerConfig  # noqa: PLC0415  (the server only for direct:)
        from sonic.server.dataplane import DataPlane  # noqa: PLC0415
        from sonic.server.models.manager import ModelManager  # noqa: PLC0415

        config = ServerConfig(model_repositories=(repository,))
        self._manager = ModelManager(config)
        self._dataplane = DataPlane(config, self._manager)
        self._dataplane.accepting = True
        self._loads: dict[str, asyncio.Task[Answer | None]] = {}

    async def _load(self, model: str) -> Answer | None:
        """None once ``model`` is loaded; the load's error as an answer when it failed. Concurrent
        requests share one load."""
        task = self._loads.get(model)
        if task is None:
            task = self._loads[model] = asyncio.get_running_loop().create_task(self._load_once(model))
        return await asyncio.shield(task)

    async def _load_once(self, model: str) -> Answer | None:
        try:
            await self._manager.load(model)
        except SonicError as exc:
            return grpc_error(exc.code, exc.message)
        return None

    async def infer(self, call: Call, timeout_s: float) -> Answer:  # noqa: ARG002  (the caller's deadline)
        from sonic.server.dataplane import Arrival  # noqa: PLC0415

        failed = await self._load(call.model)
        if failed is not None:
            return failed
        head, tail = encode_request(call.wire())
        try:
            request = decode_infer_request(b"".join([head.SerializeToString(), *tail]))
            response = await self._dataplane.infer(request, Arrival(time.perf_counter_ns()))
        except SonicError as exc:
            return Answer(exc.code.name, int(http_status(exc)), exc.message)
        # Through the bytes the wire would carry: a backend's BYTES output may hold str elements.
        outputs = {
            o.name: _tensor(
                o.name,
                o.datatype,
                tuple(o.shape),
                dtypes.array_to_bytes(o.array, dtypes.from_name(o.datatype)),
                call.model,
            )
            for o in response.outputs
        }
        return Answer("OK", 200, outputs=outputs)

    async def close(self) -> None:
        for task in self._loads.values():
            task.cancel()
        await asyncio.gather(*self._loads.values(), return_exceptions=True)
        await self._manager.close()


def open_target(spec: TargetSpec, transport: TransportKind, timeout_s: float) -> Target:
    if spec.protocol is Scheme.DIRECT:
        return DirectTarget(Path(spec.address))
    if spec.protocol is Scheme.HTTP:
        return HttpTarget(spec.address)
    return GrpcTarget(spec.address, transport, timeout_s)
