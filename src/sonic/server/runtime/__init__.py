"""The model runtime: how requests for one model version get from the event loop to its instances and back.

- :mod:`.work`: a queued request (:class:`~.work.WorkItem`) and the :class:`~.work.RequestScheduler`
  interface a model version submits to (the dynamic batcher and the ensemble implement it);
- :mod:`.policy`: the batching policy from ``config.pbtxt`` and the pure function that picks the next batch;
- :mod:`.queues`: the priority-level queues (limits, delayed requests, cancellation);
- :mod:`.tensors`: merge of a batch's inputs, execution call, split of its outputs (instance thread side);
- :mod:`.executor`: the loop each instance thread runs: take a batch, execute it, hand the results back;
- :mod:`.scheduler`: the dynamic batcher tying those together.
- :mod:`.sequences` / :mod:`.sequence_scheduler`: the sequence batcher (stateful models);
- :mod:`.ensemble`: the ensemble scheduler, which runs a graph of other models' requests on the loop;
- :mod:`.ragged`: ragged batching (``batch_input``, ``batch_output``); :mod:`.rate_limiter`: Triton's
  ``--rate-limit``; :mod:`.responses`: a decoupled request's responses from model threads to the loop.

Nothing here is imported by this file: each module is imported by name.
"""
