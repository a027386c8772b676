"""Protocol frontends: thin adapters from gRPC and HTTP onto the data plane."""
