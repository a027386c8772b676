"""The seed demonstrators run by ``sonic demo``: ProtoDUNE (seed 002), HLT (seed 000), MiniAOD (seed 001)."""
