"""Traffic records: what a server saw, request by request, for replay, tuning and validation (``sonic serve
--traffic-log``, ``sonic perf --replay``, ``sonic analyze --traffic``, ``sonic validate``).

:mod:`.schema` is the file format (columns, their meaning, reading a directory back, whole or lazily);
:mod:`.writer` the server's recorder (off the event loop, bounded, rotating). Both import ``pyarrow`` (the
``parquet`` extra): the server imports them only when recording is asked for. :mod:`.config` (what to
record, how much) and :mod:`.signatures` (input signatures by number, so a waiting record holds no nested
tuple) do not, so the server's configuration can name them; nor does :mod:`.requests` (a recorded
request's inputs and parameters as they are sent again, by ``sonic perf --replay`` and ``sonic validate``).
"""
