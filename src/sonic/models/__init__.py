"""Models for tests, benchmarks and demos, built locally (never downloaded)."""
