"""Transports: how requests reach a server (gRPC, or in memory for tests)."""
