"""A sweep's ``out_dir``: one owner at a time, the work's fingerprint first, the tables after every level.

Order of writes, so that a kill at any moment leaves a folder a resume can trust:

1. ``.lock`` is created exclusively (``O_CREAT | O_EXCL``) holding the owner's pid, host and start
   time. A second sweep on the same folder fails at once naming the owner. A lock whose pid is gone
   on this host (a killed sweep) is stale and taken over; a lock from another host is never taken
   over (its process cannot be checked from here): remove the file by hand once that sweep is gone.
2. ``run.json`` (the fingerprint of the work, the session list, status ``running``) is written
   atomically before the first request, so a resume always has a fingerprint to check.
3. ``runs.csv`` and ``levels.csv`` are replaced atomically after every level, and ``run.json``'s
   status with them; a finished level keeps its wall clock across a later kill.
4. At the end ``run.json`` says ``complete`` or ``stopped: <why>`` and the lock is removed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit import __version__
from toolkit._sweep.files import (
    LEVELS_FILE,
    RUN_FILE,
    RUNS_FILE,
    LaneLog,
    read_frame,
    read_json,
    write_frame,
    write_json,
)
from toolkit._sweep.plan import _FINGERPRINT

__all__: list[str] = []

LOCK_FILE = ".lock"
_UNREADABLE_LOCK_S = 10.0  # an empty or torn lock older than this was left by a kill mid-write
_HELD: set[Path] = set()  # folders this process has locked (two sweeps in one notebook share a pid)


def now_utc() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class OutDir:
    """The files of one sweep session in ``path`` (every method a no-op when ``path`` is None)."""

    def __init__(self, path: Path | None, params: dict[str, Any], secrets: tuple[str, ...], session: str) -> None:
        self.path = path
        self.params = params
        self.secrets = secrets
        self.session = session
        self.sessions = [session]
        self.started = now_utc()
        self.nonce: str | None = None
        self.records: list[dict[str, Any]] = []
        self.previous_runs: pd.DataFrame | None = None
        self._locked = False

    def open(self, *, resume: bool, nonce: str) -> None:
        """Lock the folder, check it against ``resume`` and the fingerprint, and write ``run.json``."""
        self.nonce = nonce
        if self.path is None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self._check(resume)
            self.write_status("running")
        except BaseException:
            self.close()
            raise

    def _check(self, resume: bool) -> None:
        previous = read_json(self.path / RUN_FILE)
        existing = LaneLog(self.path, self.secrets).read()
        if not resume:
            if previous is not None or existing:
                raise ValueError(
                    f"out_dir {str(self.path)!r} already holds a sweep; pass resume=True or use another folder"
                )
            return
        if previous is None:
            if existing:
                raise ValueError(
                    f"resume=True but out_dir {str(self.path)!r} has lane records without run.json, so what they "
                    "measured cannot be checked; start a new folder"
                )
            return
        before = previous.get("params", {})
        changed = [k for k in _FINGERPRINT if before.get(k) != _jsonish(self.params[k])]
        if changed:
            detail = "; ".join(f"{k}: {_short(before.get(k))} -> {_short(self.params[k])}" for k in changed)
            raise ValueError(f"resume=True but out_dir {str(self.path)!r} holds a sweep with different {detail}")
        self.nonce = previous.get("nonce", self.nonce)
        self.sessions = [*previous.get("sessions", []), self.session]
        self.started = previous.get("started_utc", self.started)
        self.records = existing
        self.previous_runs = read_frame(self.path / RUNS_FILE)

    def write_tables(self, runs: pd.DataFrame, levels: pd.DataFrame, status: str) -> None:
        """Replace ``runs.csv``, ``levels.csv`` and ``run.json`` (each atomically)."""
        if self.path is None:
            return
        write_frame(runs, self.path / RUNS_FILE, self.secrets)
        write_frame(levels, self.path / LEVELS_FILE, self.secrets)
        self.write_status(status)

    def write_status(self, status: str) -> None:
        """Replace ``run.json`` with the fingerprint, the sessions and ``status``."""
        if self.path is None:
            return
        run = {
            "toolkit_version": __version__,
            "status": status,
            "nonce": self.nonce,
            "sessions": self.sessions,
            "started_utc": self.started,
            "updated_utc": now_utc(),
            "params": self.params,
        }
        write_json(run, self.path / RUN_FILE, self.secrets)

    def close(self) -> None:
        """Release the lock (if this session holds it)."""
        if self._locked and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.path / LOCK_FILE).unlink()
            _HELD.discard(self.path.resolve())
            self._locked = False

    def _lock(self) -> None:
        lock = self.path / LOCK_FILE
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "session": self.session, "since_utc": now_utc()}
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = read_json(lock) or {}
                if _alive(holder, lock, self.path.resolve()):
                    raise ValueError(
                        f"out_dir {str(self.path)!r} is in use by another sweep (pid {holder.get('pid')} on "
                        f"{holder.get('host')}, since {holder.get('since_utc')}); wait for it or use another folder. "
                        f"If that sweep is gone, delete {str(lock)!r}"
                    ) from None
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(owner, handle)
            self._locked = True
            _HELD.add(self.path.resolve())
            return
        raise ValueError(
            f"out_dir {str(self.path)!r}: could not take the lock {str(lock)!r}; another sweep raced for it"
        )


def _alive(holder: dict[str, Any], lock: Path, folder: Path) -> bool:
    """Whether a lock's owner may still be running (so the lock must be respected)."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        try:  # being written by its owner right now, or torn by a kill mid-write
            return time.time() - lock.stat().st_mtime < _UNREADABLE_LOCK_S
        except FileNotFoundError:
            return False
    if holder.get("host") != socket.gethostname():
        return True  # a process on another host cannot be checked from here
    if pid == os.getpid():
        return folder in _HELD
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def _jsonish(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
