"""System shared memory (Triton's ``system_shared_memory`` extension).

:mod:`.regions` holds the regions clients register (mapped or copied access, in use until a request is
done); :mod:`.opening` opens a client's object so that it cannot be turned against the server; :mod:`.request`
resolves one request's regions once: inputs read, outputs placed, outputs written.
"""
