"""Files that others read while they change, and files others may have written: written
whole, locked for a bounded time, and read without following links or blocking."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterator

from slurm_synergy.model.errors import SynergyError

LOCK_WAIT_S = 60.0       # a lock held longer than this is someone else's fault


def shown(name: object, most: int = 200) -> str:
    """A name someone else chose, as a log line may hold it: control characters and
    anything not ASCII escaped as Python writes them (a newline cannot start a line of its
    own, a look-alike digit shows what it is), cut at `most` characters. Shown twice, it
    reads the same."""
    text = "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in str(name)[:most])
    return text if len(str(name)) <= most else text + "..."


class UntrustedFile(SynergyError):
    """A file that is not what a reader may trust: named with what and where."""


def atomic_write_text(path: Path, text: str, mode: int = 0o644, durable: bool = True,
                      group: int | None = None, owner: int | None = None) -> None:
    """Write `text` to `path` so that a reader sees the old file or the new one, never half;
    on disk before it is renamed unless `durable` is false (messages between running
    processes, rewritten several times a second: a crash loses nothing they need, and a
    sync on a shared file system can hold a training step). `group`, `owner`: the file's
    group and user (root gives a record to those who may read it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            # By descriptor: in a folder others may write, a path could be swapped.
            if group is not None or owner is not None:
                os.fchown(fh.fileno(), -1 if owner is None else owner,
                          -1 if group is None else group)
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


PRIVATE = 0o600           # what a user's jobs record (command lines among it): theirs alone


def private_folder(path: Path) -> Path:
    """`path`, with every folder of it that is missing made mode 0700: what a user's jobs
    record there is theirs alone. Folders already there keep their mode."""
    missing, up = [], path
    while not up.exists() and up != up.parent:
        missing.append(up)
        up = up.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    return path


def append_private(path: Path, line: str) -> None:
    """One line added to a record of the user's own (made mode 0600 in a private folder)."""
    private_folder(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(line)


def read_untrusted(path: Path, max_bytes: int, owner: int | None = None) -> str:
    """The text of a regular file that someone else may have written, or UntrustedFile:
    read as read_untrusted_bytes reads it, UTF-8."""
    data = read_untrusted_bytes(path, max_bytes, owner)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UntrustedFile(f"{shown(path)}: not read: not UTF-8 text ({e.reason})") from None


def read_untrusted_bytes(path: Path, max_bytes: int, owner: int | None = None,
                         follow_links: bool = False) -> bytes:
    """The bytes of a regular file that someone else may have written, or UntrustedFile.

    Opened without following a link (unless `follow_links`: a reader that only hashes
    what a program reads) and without blocking (a FIFO or a device would hold the reader
    for ever), checked on the open descriptor (a path can be swapped between a check and
    an open): a regular file, owned by `owner` when given, at most `max_bytes` long (a
    sparse 50 GB file is refused by its size, never read)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise
        why = "is a link" if e.errno == errno.ELOOP else e.strerror
        raise UntrustedFile(f"{shown(path)}: not read: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(f"{shown(path)}: not read: not a regular file")
        if owner is not None and st.st_uid != owner:
            raise UntrustedFile(f"{shown(path)}: not read: owned by uid {st.st_uid}, "
                                f"not uid {owner}")
        if st.st_size > max_bytes:
            raise UntrustedFile(f"{shown(path)}: not read: {st.st_size} bytes, over the "
                                f"{max_bytes} a reader takes")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UntrustedFile(f"{shown(path)}: not read: grew past {max_bytes} bytes while read")
    return data


@contextlib.contextmanager
def locked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path` (created 0600 if missing, never through
    a link) for the block; SynergyError when it cannot be opened or stays held `wait_s`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise SynergyError(f"cannot open the lock {path}: {e.strerror}") from None
    with os.fdopen(fd, "r+") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SynergyError(f"the lock {path} stayed held for {wait_s:.0f} s; "
                                       "gave up") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
