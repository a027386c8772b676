"""Command-line interface: ``sonic <command>``."""
