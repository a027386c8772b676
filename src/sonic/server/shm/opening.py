"""Opening a client's shared-memory object so that it cannot be turned against the server.

A key names ``/dev/shm/<name>``, a directory every local user can write to. What is found there is
opened only when it is what a client's ``shm_open`` + ``ftruncate`` makes, and only then:

- not through a symbolic link (``O_NOFOLLOW``, as glibc's ``shm_open`` opens it): a link to any file
  would otherwise let a client read that file through an input and overwrite it with an output;
- a regular file (a FIFO, socket or device is refused; ``O_NONBLOCK`` so that opening one cannot hang);
- on /dev/shm's own file system (``st_dev``), with one link only (a hard link to another file of the
  server's user is refused);
- owned by the server's own user, unless the server was told to take other users' objects
  (``sonic serve --allow-shm-from-other-users``).

The checks are made on the open descriptor (``fstat``), so swapping the name after the checks changes
nothing: the server keeps that descriptor and reads and writes only through it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from sonic.protocol.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError

# glibc's shm_open(key) opens /dev/shm/<key without its leading slash>.
SHM_ROOT = Path("/dev/shm")  # noqa: S108  (the POSIX shared-memory namespace, not a temp dir)

# O_NONBLOCK: opening a FIFO nobody writes to would otherwise block the event loop (it is refused
# right after, by fstat). O_NOCTTY: a terminal device must not become the server's controlling tty.
OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


@dataclass(frozen=True)
class Opened:
    fd: int
    size_bytes: int
    identity: tuple[int, int]  # (st_dev, st_ino): tells whether the key still names this object
    # Only the server's own user can write it (so shrink it): it may be mapped (see sonic.server.shm.regions).
    private: bool


def shm_path(key: str) -> Path:
    name = key.removeprefix("/")
    if not name or "/" in name or "\x00" in name or name in {".", ".."}:
        raise InvalidArgumentError(f"shared memory key '{key}' is not a valid POSIX shared memory name")
    return SHM_ROOT / name


def open_object(name: str, key: str, *, allow_other_users: bool) -> Opened:
    """Open and check the object of ``key`` for region ``name``; the caller owns the descriptor."""
    path = shm_path(key)
    where = f"unable to open shared memory region '{name}'"
    try:
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        raise NotFoundError(f"{where}: no shared memory object with key '{key}'") from None
    except OSError as exc:
        raise InvalidArgumentError(f"{where} (key '{key}'): {_why(exc)}") from None
    try:
        info = os.fstat(fd)
        _check(info, f"{where} (key '{key}')", allow_other_users=allow_other_users)
    except BaseException:
        os.close(fd)
        raise
    private = info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return Opened(fd, info.st_size, (info.st_dev, info.st_ino), private)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link; shared memory objects are opened without following links"
    if exc.errno == errno.EISDIR:
        return "it is a directory, not a shared memory object"
    if exc.errno == errno.ENXIO:
        return "it is a socket or a device, not a shared memory object"
    return exc.strerror or str(exc)


def _check(info: os.stat_result, where: str, *, allow_other_users: bool) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise InvalidArgumentError(f"{where}: it is a {_kind(info.st_mode)}, not a shared memory object")
    shm_dev = SHM_ROOT.stat().st_dev
    if info.st_dev != shm_dev:
        raise InvalidArgumentError(f"{where}: it is not on the file system of {SHM_ROOT}")
    if info.st_nlink != 1:
        raise InvalidArgumentError(
            f"{where}: it has {info.st_nlink} links; a shared memory object has one (hard links are refused)"
        )
    server_uid = os.geteuid()
    if info.st_uid != server_uid and not allow_other_users:
        raise PermissionDeniedError(
            f"{where}: it belongs to user {info.st_uid}, not to the server's user {server_uid}; "
            "start the server with --allow-shm-from-other-users to take other users' objects"
        )


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISFIFO: "FIFO",
        stat.S_ISSOCK: "socket",
        stat.S_ISCHR: "character device",
        stat.S_ISBLK: "block device",
        stat.S_ISDIR: "directory",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "special file")
