"""Helpers for tests and benchmarks: launchers for real servers, model repositories."""
