"""The model runtime: how requests for one model version get from the event loop to its instances and back.

- :mod:`.policy`: the batching policy from ``config.pbtxt`` and the pure function that picks the next batch;
- :mod:`.queues`: the priority-level queues (limits, delayed requests, cancellation);
- :mod:`.tensors`: merge of a batch's inputs, execution call, split of its outputs (instance thread side);
- :mod:`.executor`: the loop each instance thread runs: take a batch, execute it, hand the results back;
- :mod:`.inline`: whether a version's batches run on the event loop instead (tiny executions);
- :mod:`.scheduler`: the dynamic batcher tying those together.
- :mod:`.sequences` / :mod:`.sequence_scheduler`: the sequence batcher (stateful models);
- :mod:`.ensemble`: the ensemble scheduler, which runs a graph of other models' requests on the loop,
  and the ensemble platform's entry in the backend registry;
- :mod:`.ragged`: ragged batching (``batch_input``, ``batch_output``); :mod:`.rate_limiter`: Triton's
  ``--rate-limit``.

The runtime calls the backends (:mod:`sonic.server.backends`), never the other way round; what both use,
the work item and the scheduler interface (:mod:`sonic.server.work`) and a decoupled request's response
channel (:mod:`sonic.server.responses`), sits below both. ``tests/unit/test_layering.py`` keeps it so.

Nothing here is imported by this file: each module is imported by name.
"""
