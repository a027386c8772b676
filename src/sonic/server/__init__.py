"""The inference server: repository, batching, backends and protocol frontends."""
