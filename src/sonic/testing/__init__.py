"""Helpers for tests and benchmarks only: model repositories, HTTP/2 frame recording.

Nothing in ``sonic`` outside this package imports it; server launchers are in :mod:`sonic.launch`.
"""
