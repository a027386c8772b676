"""coffea integration: :class:`triton_wrapper`, a drop-in for ``coffea.ml_tools.triton_wrapper`` on sonic.client.

The class is in :mod:`.wrapper`.

Needs coffea (``pip install 'sonic-inference[coffea]'``)::

    from sonic.coffea import triton_wrapper   # instead of: from coffea.ml_tools import triton_wrapper
"""

from sonic.coffea.wrapper import triton_wrapper

__all__ = ["triton_wrapper"]
