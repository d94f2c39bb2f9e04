"""File I/O shared by every layer that writes: atomic replacement, and the zarr spec of the
on-disk stores (the trajectory recorder and a sweep's results store)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from marljax.schema import ConfigError

NAME_MAX = 255  # bytes in one path component on the common filesystems


class DamagedFile(RuntimeError):
    """A file marljax wrote earlier does not read back; the message names it and the way out."""


def read_json(path: Path, remedy: str, max_bytes: int = 64 << 20) -> Any:
    """The JSON in `path` (a file marljax wrote). DamagedFile naming the file, what is wrong and
    `remedy` when it is garbled, not UTF-8, nested too deep for Python's parser, or over
    `max_bytes` (refused unread). FileNotFoundError passes through."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise DamagedFile(f"{path} is {size} bytes, more than the {max_bytes} a file of this kind can hold; {remedy}")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedFile(f"{path} is not valid JSON ({exc}); {remedy}") from None
    except RecursionError:
        raise DamagedFile(f"{path} is nested too deep to be a file marljax wrote; {remedy}") from None


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError inside names `path` when it names no file (a full disk fails a write() or a
    close(), which carry no file name): the message then says which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> str | None:
    """A full disk (or quota) as one line naming the file, or None for any other failure."""
    if not isinstance(exc, OSError) or exc.errno not in DISK_FULL:
        return None
    where = f"writing {exc.filename}" if exc.filename else "writing a file"
    return f"{where} failed: {exc.strerror} (the disk is full); free space there or write on another disk"


def write_text_atomic(path: Path, text: str) -> Path:
    """Replace `path` with `text` all at once: a temporary file, then a rename (a crash leaves the
    old file or the new, never half of one)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with naming(path):
            tmp.write_text(text)
    except OSError:
        tmp.unlink(missing_ok=True)  # a part written before the disk filled: not left beside the file
        raise
    tmp.replace(path)
    return path


def zarr_spec(path: Path) -> dict:
    """tensorstore spec of a zarr array in a local directory."""
    return {"driver": "zarr", "kvstore": {"driver": "file", "path": str(path)}}


def expand_home(path: str, field: str) -> str:
    """`path` with a leading ~ or ~user expanded, as the shell would have (YAML and a quoted value
    keep it); ConfigError(field) for a ~user that names no user, rather than a directory named '~x'."""
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        raise ConfigError(field, f"{path!r}: {path.split('/')[0]} names no user of this machine; give the full path")
    return expanded


def check_writable_dir(path: Path) -> str | None:
    """Why directory `path` cannot be created and written here, or None; creates nothing.
    Checks: a component too long, the path or one of its parents a file, no write permission
    in the nearest existing directory (a read-only filesystem, another owner)."""
    path = Path(path).absolute()
    long = [part for part in path.parts if len(part.encode()) > NAME_MAX]
    if long:
        return f"the name {long[0][:40]}... is longer than {NAME_MAX} bytes"
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a directory"
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():  # a loop, or a target that is gone
            return f"{link} is a symbolic link that leads nowhere (a loop or a missing target); remove it or choose another path"
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so {path} cannot be a directory under it"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable here (a read-only filesystem or no permission)"
    return None


class DirectoryLock:
    """An advisory lock on a directory (`<dir>/.marljax.lock`, flock): a second process that
    asks for it while it is held gets, from `acquire()`, a line naming the holder. Released on
    `release()` (which removes the file: a finished run leaves none) or exit."""

    def __init__(self, directory: Path):
        self.path = Path(directory).absolute() / ".marljax.lock"
        self._fd: int | None = None
        self._created: Path | None = None  # the outermost directory acquire() created

    def acquire(self) -> str | None:
        """None once the lock is held; else a line saying who holds it."""
        missing = self.path.parent
        while not missing.parent.exists():
            missing = missing.parent
        self._created = None if missing.exists() else missing
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    return f"process {holder}"
                raise
            if self._still_the_file(fd):
                break
            os.close(fd)  # its holder removed the file between our open and our lock: take the new one
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return None

    def _still_the_file(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Remove the lock file and unlock (in that order, so that no one locks a removed file:
        see `acquire`); where acquire() created the directory and nothing else was written
        there, remove the directory too (a failed command leaves nothing behind)."""
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            if self._created is not None and not any(self.path.parent.iterdir()):
                directory = self.path.parent
                while True:
                    directory.rmdir()
                    if directory == self._created:
                        break
                    directory = directory.parent
