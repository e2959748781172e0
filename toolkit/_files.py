"""Reading a user's file safely: a regular file, never blocking, bounded in size.

A path handed to the toolkit (a model's ``config.json``, a prompts file, a trace) may name a FIFO, a
device such as ``/dev/zero`` or a multi-gigabyte file. Opening a FIFO for reading blocks until a
writer appears and a device can be read forever, so every user file is opened without blocking,
checked to be a regular file, and read only up to a stated cap. Each refusal is a ``ValueError``
that names the argument, the file and the bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__: list[str] = []


def read_user_bytes(name: str, path: object, *, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them.

    Parameters
    ----------
    name : str
        The argument or option the path came from, for the error message.
    path : str or os.PathLike
        The file to read.
    max_bytes : int
        The largest file accepted.

    Raises
    ------
    ValueError
        When ``path`` is missing, not a regular file (a directory, FIFO, socket or device), or larger
        than ``max_bytes``.
    """
    try:
        file = Path(os.fspath(path))
    except TypeError:
        raise ValueError(f"{name} must be a path to a file, got {type(path).__name__}") from None
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ValueError(f"{name}: no such file: {file}") from None
    except OSError as exc:
        raise ValueError(f"{name}: cannot open {file}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{name}: {file} is not a regular file (a directory, FIFO, socket or device)")
        if info.st_size > max_bytes:
            raise ValueError(f"{name}: {file} has {info.st_size} bytes; at most {max_bytes} are read")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        # read to end, not to st_size: the file may grow while it is read
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise ValueError(f"{name}: {file} grew past {max_bytes} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_user_text(name: str, path: object, *, max_bytes: int) -> str:
    """The UTF-8 text of the regular file at ``path`` (a leading byte-order mark dropped), at most
    ``max_bytes`` bytes; :func:`read_user_bytes` says what is refused. Text that is not UTF-8 is a
    ``ValueError`` naming the file and the offset of the first bad byte."""
    data = read_user_bytes(name, path, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: {os.fspath(path)} is not UTF-8 text (byte {exc.start})") from None
