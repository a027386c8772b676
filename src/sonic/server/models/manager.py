"""Model lifecycle: load, reload, unload and lookup of model versions.

Loading (reading files, creating sessions) runs in worker threads; the event loop keeps serving
other models meanwhile. A model that fails to load stays listed as UNAVAILABLE with the reason.
An ensemble loads with its step models and is unloaded with them (``server/models/ensemble_steps.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import NotFoundError, SonicError, UnavailableError, quote
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.wire import ModelState
from sonic.server import backends
from sonic.server.backends.base import InstanceContext, RequestBackend
from sonic.server.cache import ResponseCache
from sonic.server.calls.caller import ServerModelCaller
from sonic.server.classification.top_k import Labels
from sonic.server.config import ServerConfig
from sonic.server.metrics.custom import CustomMetrics
from sonic.server.models.ensemble_steps import StepGraph, step_models
from sonic.server.models.entries import UNLOADED, IndexRow, ModelEntry, VersionState, step_state
from sonic.server.models.instance_thread import InstanceThread
from sonic.server.models.load_config import (
    VersionsFailedError,
    failure_reason,
    prepare_config,
    versions_failed,
)
from sonic.server.models.paths import ModelFiles
from sonic.server.models.repository import (
    ModelLocation,
    Repository,
    fingerprint,
    parse_version,
)
from sonic.server.models.version import ModelVersion
from sonic.server.models.warmup import run_warmup, warmup_samples
from sonic.server.runtime.executor import ModelInstance
from sonic.server.runtime.inline import InlinePolicy
from sonic.server.runtime.rate_limiter import CPU_DEVICE, InstanceLimits, RateLimiter
from sonic.server.traffic.rows import TrafficRecorder

log = logging.getLogger(__name__)


class ModelManager:
    def __init__(self, config: ServerConfig, traffic: TrafficRecorder | None = None) -> None:
        self._config = config
        self._traffic = traffic  # handed to every version it loads
        self.repository = Repository(
            config.model_repositories, allow_links_outside=config.security.allow_model_links_outside
        )
        self._entries: dict[str, ModelEntry] = {}
        # One server-wide response cache, for models whose config says response_cache { enable: true }:
        # client requests and model-to-model calls (ensemble steps, BLS) alike, as in Triton.
        self.cache = ResponseCache(config.cache_size_bytes) if config.cache_size_bytes > 0 else None
        self.custom_metrics = CustomMetrics()  # what Python models define with pb_utils.MetricFamily
        limits = config.rate_limit
        self._rate_limiter = RateLimiter(limits.resources) if limits is not None else None
        # Ensembles and their step models (server/models/ensemble_steps.py).
        self._steps = StepGraph(self.load, self._unload, lambda name: step_state(self._entries.get(name)))

    def _entry(self, name: str) -> ModelEntry:
        if name not in self._entries:
            self._entries[name] = ModelEntry(name)
        return self._entries[name]

    # --- lookup ---------------------------------------------------------------------------------------

    def get(self, name: str, version: str = "") -> ModelVersion:
        entry = self._entries.get(name)
        if entry is None:
            raise NotFoundError(f"Request for unknown model: {quote(name)} is not found")
        if version:
            number = parse_version(version)  # INVALID_ARGUMENT, in Triton's words, if not a number >= 0
            state = entry.versions.get(number)
            if state is None:
                raise NotFoundError(
                    f"Request for unknown model: {quote(name)} version {version} is not found"
                )
            if state.model is None or state.state is not ModelState.READY:
                raise UnavailableError(
                    f"Request for unknown model: {quote(name)} version {version} is not at ready state"
                    + (f": {state.reason}" if state.reason else "")
                )
            return state.model
        ready = [v for v, s in entry.versions.items() if s.state is ModelState.READY and s.model is not None]
        if not ready:
            detail = entry.versions_and_reasons()
            # Triton's words and status (NOT_FOUND, 404, unlike a named version that is not ready); then why.
            raise NotFoundError(
                f"Request for unknown model: {quote(name)} has no available versions"
                + (f": {detail}" if detail else "")
            )
        model = entry.versions[max(ready)].model
        assert model is not None
        return model

    def config_of(self, name: str) -> model_config_pb2.ModelConfig:
        entry = self._entries.get(name)
        if entry is None or entry.config is None:
            raise NotFoundError(f"Request for unknown model: {quote(name)} is not found")
        return entry.config

    def ready_versions(self, name: str) -> list[ModelVersion]:
        entry = self._entries.get(name)
        return entry.ready_models() if entry is not None else []

    def loaded_models(self) -> list[str]:
        return [name for name in self._entries if self.ready_versions(name)]

    def unready_models(self) -> list[str]:
        """The models that make a server with strict readiness not ready (Triton's --strict-readiness)."""
        return [name for name, entry in self._entries.items() if not entry.counts_as_ready()]

    def index(self, ready_only: bool) -> list[IndexRow]:
        found, conflicts = self.repository.scan()
        rows: list[IndexRow] = []
        for name in sorted(set(found) | set(conflicts) | set(self._entries)):
            entry = self._entries.get(name)
            if entry is None or (not entry.versions and not entry.reason):
                if not ready_only:
                    rows.append(IndexRow(name, "", ModelState.NONE, conflicts.get(name, "")))
                continue
            if not entry.versions:
                if not ready_only:
                    rows.append(IndexRow(name, "", entry.state, entry.reason))
                continue
            for version, state in sorted(entry.versions.items()):
                if ready_only and state.state is not ModelState.READY:
                    continue
                rows.append(IndexRow(name, str(version), state.state, state.reason))
        return rows

    # --- load / unload ----------------------------------------------------------------------------------

    async def load(
        self, name: str, override: model_config_pb2.ModelConfig | None = None, chain: tuple[str, ...] = ()
    ) -> None:
        """Load (or reload) a model; raises the load error after recording it in the index.
        ``chain``: the ensembles that load it as a step model, outermost first."""
        location = self.repository.locate(name)
        entry = self._entry(name)
        if not chain:
            self._steps.requested.add(name)
        async with entry.lock:
            try:
                await self._load_locked(entry, location, override, (*chain, name))
            except SonicError as exc:
                if not self.ready_versions(name):  # a failed reload leaves the serving versions serving
                    entry.state, entry.reason = ModelState.UNAVAILABLE, str(exc)
                log.error("model %s failed to load: %s", name, exc)  # noqa: TRY400  (message says it all)
                raise
        await self._steps.load_waiting(name, chain)

    async def _load_locked(
        self,
        entry: ModelEntry,
        location: ModelLocation,
        override: model_config_pb2.ModelConfig | None,
        chain: tuple[str, ...],
    ) -> None:
        if override is None and entry.override is not None and self.ready_versions(entry.name):
            current = await asyncio.to_thread(fingerprint, location.path)
            if current == entry.fingerprint:  # as Triton: files unchanged, the override keeps serving
                override = entry.override
        try:
            prepared = await asyncio.to_thread(
                prepare_config,
                location,
                override,
                self._config.gpu_count,
                auto_complete=self._config.auto_complete_config,
                allow_links_outside=self._config.security.allow_model_links_outside,
                backend_options=self._config.backend_options,
            )
        except VersionsFailedError as failure:
            for version, reason in failure.reasons.items():  # as Triton: each UNAVAILABLE, with the reason
                if version not in entry.versions or entry.versions[version].state is not ModelState.READY:
                    entry.versions[version] = VersionState(ModelState.UNAVAILABLE, reason)
            raise failure.error from None
        config, spec, backend_cls, selected = (
            prepared.config,
            prepared.spec,
            prepared.backend_cls,
            prepared.versions,
        )
        await self._steps.load_steps(chain, step_models(config))
        labels = self._labels(config, prepared.labels)
        new_models: dict[int, ModelVersion] = {}
        failures: dict[int, str] = {}
        for version in selected:
            previous = entry.versions.get(version)
            if previous is None or previous.state is not ModelState.READY:
                entry.versions[version] = VersionState(ModelState.LOADING)
            try:
                new_models[version] = await self._create_version(
                    config, spec, backend_cls, prepared.files, version
                )
                new_models[version].traffic = self._traffic
                new_models[version].labels = labels
            except SonicError as exc:
                failures[version] = failure_reason(exc)
        if not new_models and failures:
            # As Triton: a version that was serving keeps serving; the failure is reported.
            for version, reason in failures.items():
                if entry.versions[version].state is not ModelState.READY:
                    entry.versions[version] = VersionState(ModelState.UNAVAILABLE, reason)
            raise versions_failed(location.name, failures)
        old = {v: s for v, s in entry.versions.items() if s.model is not None and s.state is ModelState.READY}
        for version, model in new_models.items():
            model.scheduler.start()
            entry.versions[version] = VersionState(ModelState.READY, "", model)
        for version, reason in failures.items():
            if version not in old:
                entry.versions[version] = VersionState(ModelState.UNAVAILABLE, reason)
        entry.config, entry.state, entry.reason = config, ModelState.READY, ""
        entry.override = override
        self._steps.loaded(location.name, step_models(config))
        entry.fingerprint = await asyncio.to_thread(fingerprint, location.path)
        for version, state in old.items():
            if version in failures:
                continue  # its new copy failed to load: the old one keeps serving
            if version not in selected:
                entry.versions[version] = VersionState(ModelState.UNLOADING, "", state.model)
            assert state.model is not None
            await self._close_version(state.model)
            if version not in selected:
                entry.versions[version] = VersionState(ModelState.UNAVAILABLE, UNLOADED)
        log.info("model %s loaded, versions %s", location.name, sorted(new_models))

    def _labels(self, config: model_config_pb2.ModelConfig, own: Labels) -> Labels:
        """The labels of a model's outputs; an ensemble's output without a label file of its own takes
        those of the step output it is mapped from, as Triton's (its step models are loaded by now)."""
        labels = dict(own)
        for step in config.ensemble_scheduling.step if config.platform == "ensemble" else ():
            for step_output, output in step.output_map.items():
                if output in labels or not any(o.name == output for o in config.output):
                    continue
                version = str(step.model_version) if step.model_version >= 0 else ""
                with contextlib.suppress(NotFoundError, UnavailableError):
                    step_labels = self.get(step.model_name, version).labels.get(step_output)
                    if step_labels is not None:
                        labels[output] = step_labels
        return labels

    async def _create_version(
        self,
        config: model_config_pb2.ModelConfig,
        spec: ModelSpec,
        backend_cls: type[backends.Backend],
        files: ModelFiles,
        version: int,
    ) -> ModelVersion:
        context = self._contexts(config, spec, backend_cls, files, version)
        scheduler = backend_cls.create_scheduler(
            context(instance_name=config.name, device_kind="cpu", device_id=0)
        )
        if scheduler is not None:  # the backend runs requests itself, with no instance
            return ModelVersion.create(config, spec, version, [], backend_cls, scheduler)
        merged = not issubclass(backend_cls, RequestBackend)
        samples = warmup_samples(config, spec, files, merged_batches=merged)
        instances: list[ModelInstance] = []
        try:
            for group, kind, device, name in _instance_slots(config):
                instance = await _start_instance(
                    backend_cls,
                    context(instance_name=name, device_kind=kind, device_id=device),
                    group.passive,
                )
                instances.append(instance)
                self._limit(instance, group, device if kind == "gpu" else CPU_DEVICE)
                if samples:  # before the model reports ready, as Triton's model_warmup
                    await instance.thread.run(run_warmup, config, spec, files, instance.backend, samples)
            # Inside the try: a scheduler refusing the config (sequence, ragged) closes the instances.
            model = ModelVersion.create(
                config,
                spec,
                version,
                instances,
                backend_cls,
                files=files,
                inline=InlinePolicy(threshold_us=self._config.inline_execution_us),
            )
        except BaseException:
            await self._close_instances(instances)
            raise
        if self._config.metrics.port is not None and self._config.metrics.histograms:
            model.stats.enable_histograms()
        return model

    def _contexts(
        self,
        config: model_config_pb2.ModelConfig,
        spec: ModelSpec,
        backend_cls: type[backends.Backend],
        files: ModelFiles,
        version: int,
    ) -> functools.partial[InstanceContext]:
        """The one factory of a version's ``InstanceContext``s: each instance adds its name and device
        (``instance_name``, ``device_kind``, ``device_id``, by keyword)."""
        version_dir = files.folder / str(version)
        model_path = files.version_file(version, "default_model_filename", config.default_model_filename)
        options = self._config.backend_options.for_backend(backend_cls.name)
        caller = ServerModelCaller(self.get, asyncio.get_running_loop(), self.cache)

        # A partial, not a nested function: compiled (mypyc), a nested function would hold all of this
        # method's locals in a reference cycle with it (sonic.compiled: no nested functions).
        return functools.partial(
            InstanceContext,
            config=config,
            spec=spec,
            version=version,
            version_dir=version_dir,
            model_path=model_path,
            options=options,
            models=caller,
            custom_metrics=self.custom_metrics,
            allow_links_outside=files.allow_links_outside,
        )

    def _limit(
        self, instance: ModelInstance, group: model_config_pb2.ModelInstanceGroup, device: int
    ) -> None:
        """Register an active instance with the rate limiter, when it is on (a passive one never runs)."""
        if self._rate_limiter is None or instance.passive:
            return
        self._rate_limiter.register(instance, InstanceLimits.from_group(group, device))
        instance.limiter = self._rate_limiter

    async def _close_instances(self, instances: list[ModelInstance]) -> None:
        for instance in instances:
            if instance.limiter is not None:
                instance.limiter.unregister(instance)
            try:
                await instance.thread.run(instance.backend.close)
            except Exception:
                log.exception("closing instance %s failed", instance.name)
            instance.thread.shutdown()

    async def _close_version(self, model: ModelVersion) -> None:
        await model.scheduler.close(self._config.exit_timeout_s)
        await self._close_instances(model.instances)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        steps = self._steps.calls.get(name, ()) if unload_dependents else ()
        self._steps.forget(name)
        await self._unload(name)
        for step in self._steps.unused(steps):  # Triton's unload_dependents: an ensemble's own steps
            await self.unload(step, unload_dependents=True)

    async def _unload(self, name: str) -> None:
        entry = self._entries.get(name)
        if entry is None:
            # As Triton: unloading what is not loaded is no error, whatever the name (nothing is opened).
            return
        async with entry.lock:
            closing = [(v, s.model) for v, s in entry.versions.items() if s.model is not None]
            for version, model in closing:
                entry.versions[version] = VersionState(ModelState.UNLOADING, "", model)
            for version, model in closing:
                assert model is not None
                await self._close_version(model)
                entry.versions[version] = VersionState(ModelState.UNAVAILABLE, UNLOADED)
            entry.state, entry.reason = ModelState.UNAVAILABLE, UNLOADED
            log.info("model %s unloaded", name)
        await self._steps.unload_dependents(name)

    async def load_all(self) -> None:
        found, conflicts = self.repository.scan()
        for name, reason in conflicts.items():
            entry = self._entry(name)
            entry.state, entry.reason = ModelState.UNAVAILABLE, reason
        for name in found:
            if name in self._entries:
                continue  # loaded already as the step model of an ensemble
            try:
                await self.load(name)
            except SonicError as exc:
                self._record_refusal(name, exc)  # in the index; the server stays up unless exit_on_error

    def _record_refusal(self, name: str, exc: SonicError) -> None:
        """A model of the repository refused before its load began (its folder links outside, with
        --refuse-model-links-outside): UNAVAILABLE with the reason, as one that failed to load."""
        entry = self._entry(name)
        if not entry.versions and not entry.reason:
            entry.state, entry.reason = ModelState.UNAVAILABLE, str(exc)
            log.error("model %s failed to load: %s", name, exc)

    async def poll(self) -> None:
        """One repository rescan: load new or changed models, unload removed ones."""
        found, _ = self.repository.scan()
        for name in list(self._entries):
            if name not in found and self.ready_versions(name):
                await self.unload(name)
        for name, location in found.items():
            entry = self._entries.get(name)
            current = await asyncio.to_thread(fingerprint, location.path)
            if entry is not None and entry.fingerprint == current:
                continue
            try:
                await self.load(name)
            except SonicError as exc:
                self._record_refusal(name, exc)
                self._entry(name).fingerprint = current  # do not retry until the files change

    async def close(self) -> None:
        for name in list(self._entries):
            await self.unload(name)


def _instance_slots(
    config: model_config_pb2.ModelConfig,
) -> Iterator[tuple[model_config_pb2.ModelInstanceGroup, str, int, str]]:
    """Each instance the config's ``instance_group``s ask for: its group, device kind, device and name."""
    for group in config.instance_group:
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU:
            for device in group.gpus:
                for index in range(group.count):
                    yield group, "gpu", device, f"{group.name}_{device}_{index}"
        else:
            for index in range(group.count):
                yield group, "cpu", 0, f"{group.name}_{index}"


async def _start_instance(
    backend_cls: type[backends.Backend], context: InstanceContext, passive: bool
) -> ModelInstance:
    """One instance: its thread, and the backend object created on it (the thread stops if that fails)."""
    thread = InstanceThread(f"sonic-{context.instance_name}")
    try:
        backend = await thread.run(backend_cls, context)
    except BaseException:
        thread.shutdown()
        raise
    return ModelInstance(context.instance_name, backend, thread, passive=passive)
