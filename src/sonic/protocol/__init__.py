"""Transport-neutral protocol pieces: datatypes, tensor bytes, model configuration."""
