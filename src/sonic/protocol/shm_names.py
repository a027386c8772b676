"""How ``sonic.client`` names its system shared-memory regions, so a server can tell whose they are.

``sonic_<pid>_n<pid namespace>_<random>_<n>``: the creator's pid and the inode of its pid namespace.
A server on the same host reclaims the regions of a client that exited (:mod:`sonic.server.shm`);
the pid is trusted only when the namespace is the server's own, so a live client in another container
(another pid namespace, shared /dev/shm) is never taken for a dead one.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

OWNER_PATTERN = re.compile(r"^sonic_(?P<pid>\d+)_n(?P<namespace>\d+)_")


def pid_namespace() -> int:
    """This process's pid namespace (the inode of /proc/self/ns/pid); 0 where it cannot be read."""
    try:
        return Path("/proc/self/ns/pid").stat().st_ino
    except OSError:
        return 0


def region_prefix() -> str:
    """A fresh prefix for this process's regions (one per region pool)."""
    return f"sonic_{os.getpid()}_n{pid_namespace()}_{uuid.uuid4().hex[:8]}"


def owner_exited(name: str, namespace: int) -> bool:
    """The region was made by a sonic client in pid namespace ``namespace`` that is no longer running."""
    match = OWNER_PATTERN.match(name)
    if match is None or namespace == 0 or int(match["namespace"]) != namespace:
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, under another user
    return False
