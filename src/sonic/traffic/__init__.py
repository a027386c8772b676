"""Traffic records: what a server saw, request by request, for replay and tuning (``sonic serve
--traffic-log``, ``sonic perf --replay``, ``sonic analyze --traffic``).

:mod:`.schema` is the file format (columns, their meaning, reading a directory back); :mod:`.writer`
the server's recorder (off the event loop, bounded, rotating). Both import ``pyarrow`` (the ``parquet``
extra): the server imports them only when recording is asked for. :mod:`.config` (what to record, how
much) and :mod:`.signatures` (input signatures by number, so a waiting record holds no nested tuple) do
not, so the server's configuration can name them.
"""
