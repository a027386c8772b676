"""How ``sonic.client`` names its system shared-memory regions, so a server can tell whose they are.

``sonic_<pid>_n<pid namespace>_<random>_<n>``: the creator's pid and the inode of its pid namespace.
A server on the same host reclaims the regions of a client that exited (:mod:`sonic.server.shm.regions`);
the pid is trusted only when the namespace is the server's own, so a live client in another container
(another pid namespace, shared /dev/shm) is never taken for a dead one.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

# Region names are the client's: ASCII digits only (``\d`` takes any script's), and no more than a pid
# (Linux's PID_MAX_LIMIT is 2**22) or an inode number can have, so ``int`` and ``os.kill`` never overflow.
OWNER_PATTERN = re.compile(r"^sonic_(?P<pid>[0-9]{1,7})_n(?P<namespace>[0-9]{1,20})_")
MAX_PID = 1 << 22


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
    pid = int(match["pid"])
    if not 0 < pid <= MAX_PID:
        return False  # no process has it (os.kill(0, ...) would ask about our own process group)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, under another user
    return False
