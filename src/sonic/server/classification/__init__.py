"""Triton's classification extension: an output asked with ``classification`` k answers its top k as text.

:mod:`.top_k` reads a model's label files and classifies an output; :mod:`.order` is the order Triton 2.51
lists classes in (libstdc++'s ``std::sort`` of the indices, largest value first).
"""
