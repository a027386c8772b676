"""Helpers for tests and benchmarks only: model repositories, HTTP/2 frame recording.

Nothing in ``sonic`` outside this package imports it; server launchers are in :mod:`sonic.launch`.

- :mod:`.repository`: model repositories for client tests and benchmarks;
- :mod:`.h2` (our HTTP/2 connections without sockets), :mod:`.h2peer` (a raw HTTP/2 peer on a socket),
  :mod:`.h2attacks` (published denial-of-service attacks and a bystander client), :mod:`.bomb` (compression bombs);
- :mod:`.fuzz`: input mutations and bounded decodes for ``tests/fuzz``; :mod:`.chromium`: headless screenshots.
"""
