"""What else the host was doing while something was measured: load, CPU steal and other processes' CPU.

A local server and its client share the host's cores with whatever else runs there, and a busy host
slows the server by an unknown factor. :func:`sample` reads the host's counters (Linux ``/proc``;
elsewhere only the load average) and :func:`conditions` turns two samples into the shares of CPU
time, between them, that went to others: the hypervisor (``steal``) and processes other than the
client and the server (``other_cpu_share``: all cores' busy time, steal included, less this
process's and the server's own ``utime + stime``, over all cores' time). A measurement is *busy*
when others took more than ``BUSY_OTHER_SHARE`` of the host's CPU time. Only without ``/proc`` or
without the server's process (a server started elsewhere) does the rule fall back to the 1-minute
load average, above ``BUSY_LOAD_PER_CORE`` per core at either end; that average counts the server's
and the client's own threads, so a local server measured by its own load looks busy.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

__all__: list[str] = []

# Others' share of all cores above which a measurement is marked busy: a quarter of a 2-core host is
# half a core, enough to move a one-thread server's step time by tens of percent (issue 16's
# measurements: 45-63 ms per token idle against 380-2,100 ms beside one busy process).
BUSY_OTHER_SHARE = 0.25
# 1-minute load average per core above which a host is busy (something holds at least half of its
# cores): used only where other processes' CPU time cannot be told from the server's (no /proc, or no
# server process on this host).
BUSY_LOAD_PER_CORE = 0.5
# how every busy-host message begins (the sweep's load, the profile's refusal)
BUSY_OPENING = "Measured on a busy host: "


@dataclass(frozen=True)
class HostSample:
    """One reading of the host's counters (NaN where the OS does not expose one)."""

    wall_s: float
    load_1m: float
    cpu_total_s: float  # all cores, all states
    cpu_idle_s: float  # idle + iowait
    cpu_steal_s: float
    client_cpu_s: float  # this process
    server_cpu_s: float  # the local server's process, NaN when unknown


def _tick_s() -> float:
    try:
        return 1.0 / os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 0.01


def _proc_cpu_s(pid: int | None) -> float:
    if pid is None:
        return math.nan
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * _tick_s()  # utime + stime
    except (OSError, IndexError, ValueError):
        return math.nan


def sample(server_pid: int | None = None) -> HostSample:
    """Read the host's load, CPU counters and the CPU time of this process and of ``server_pid``."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = math.nan
    total = idle = steal = math.nan
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        tick = _tick_s()
        total = sum(values[:8]) * tick  # user nice system idle iowait irq softirq steal
        idle = (values[3] + values[4]) * tick
        steal = values[7] * tick if len(values) > 7 else math.nan
    except (OSError, ValueError, IndexError):
        pass
    return HostSample(time.perf_counter(), load, total, idle, steal, time.process_time(), _proc_cpu_s(server_pid))


def conditions(before: HostSample, after: HostSample) -> dict[str, float | bool]:
    """The host's conditions between two samples.

    Returns
    -------
    dict
        ``load_1m_before``, ``load_1m_after``; ``steal_share`` (of all cores' time, stolen by the
        hypervisor); ``client_cpu_s`` and ``server_cpu_s`` (CPU seconds of this process and of the
        server, NaN when unknown); ``other_cpu_share`` (of all cores' time, used by other
        processes: NaN without ``/proc`` or without the server's process); ``busy``.
    """
    total = after.cpu_total_s - before.cpu_total_s
    client = after.client_cpu_s - before.client_cpu_s
    server = after.server_cpu_s - before.server_cpu_s
    steal = (after.cpu_steal_s - before.cpu_steal_s) / total if total > 0 else math.nan
    used = total - (after.cpu_idle_s - before.cpu_idle_s)
    other = (used - client - server) / total if total > 0 else math.nan
    other = max(other, 0.0) if math.isfinite(other) else math.nan  # max(0.0, nan) would be 0.0
    cores = os.cpu_count() or 1
    if math.isfinite(other):
        busy = other > BUSY_OTHER_SHARE
    else:
        busy = max(before.load_1m, after.load_1m) > BUSY_LOAD_PER_CORE * cores
    return {
        "load_1m_before": before.load_1m,
        "load_1m_after": after.load_1m,
        "steal_share": steal,
        "client_cpu_s": client,
        "server_cpu_s": server,
        "other_cpu_share": other,
        "busy": bool(busy),
    }
