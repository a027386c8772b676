"""Models and their lifecycle: the repository, what a model loads with, its versions and their instances.

:mod:`.manager` loads, reloads, unloads and looks up model versions; :mod:`.entries` records each model's
versions' states and reasons as the index shows them; :mod:`.repository` reads Triton's repository layout and
:mod:`.load_config` the configuration a model loads with (a model-control override included), after
:mod:`.repo_agents` ran the repository agents it asks for (the checksum agent, built in); :mod:`.paths`
is the one choke point for files a configuration names; :mod:`.ensemble_steps` loads an ensemble with its step
models; :mod:`.version` is a loaded version (request validation into a work item, scheduling, statistics);
:mod:`.instance_thread` the thread that owns an instance's backend; :mod:`.warmup` its executions at load.
"""
