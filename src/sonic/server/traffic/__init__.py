"""The server's side of ``sonic serve --traffic-log DIR``; the record's format is :mod:`sonic.traffic`.

:mod:`.rows` is what a request leaves on the event loop; :mod:`.table` turns the writer thread's pending rows
into one Arrow table; :mod:`.switch` turns recording on and off while serving. (These stay in the server:
they read the server's request timings, and :mod:`sonic.traffic` is below the server, read by ``sonic perf``
and ``sonic validate`` too.)
"""
