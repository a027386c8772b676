"""Model-to-model calls inside one server: ensemble steps and Python models' BLS requests.

:mod:`.caller` sends one request to another model of this server and waits for its answer; :mod:`.decoupled`
is BLS ``exec(decoupled=True)``: a decoupled model's responses, one at a time, to a Python model's thread.
"""
