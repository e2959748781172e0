"""Whether a host was busy: other processes' CPU time, never the measured server's own (issue 16)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from toolkit._sweep import host_state
from toolkit._sweep.host_state import HostSample


def _pair(*, load: float, total: float, idle: float, steal: float, client: float, server: float):
    before = HostSample(wall_s=0.0, load_1m=load, cpu_total_s=0.0, cpu_idle_s=0.0, cpu_steal_s=0.0,
                        client_cpu_s=0.0, server_cpu_s=0.0)  # fmt: skip
    after = HostSample(wall_s=10.0, load_1m=load, cpu_total_s=total, cpu_idle_s=idle, cpu_steal_s=steal,
                       client_cpu_s=client, server_cpu_s=server)  # fmt: skip
    return before, after


def test_the_servers_and_clients_own_cpu_time_is_not_counted_as_others():
    # 2 cores for 10 s = 20 core-s; 8 busy (steal 1 of them); the server used 5 and the client 2, so
    # others (steal included) took 8 - 5 - 2 = 1 core-s = 5%, although the load average is 3 on 2 cores
    state = host_state.conditions(*_pair(load=3.0, total=20.0, idle=12.0, steal=1.0, client=2.0, server=5.0))
    assert state["other_cpu_share"] == pytest.approx(1.0 / 20.0)
    assert state["steal_share"] == pytest.approx(1.0 / 20.0)
    assert state["busy"] is False


def test_others_above_a_quarter_of_the_host_make_it_busy_and_steal_counts():
    # 20 core-s, 14 busy, of which 3 stolen by the hypervisor; server 6, client 2: others 6/20 = 30%
    state = host_state.conditions(*_pair(load=0.1, total=20.0, idle=6.0, steal=3.0, client=2.0, server=6.0))
    assert state["other_cpu_share"] == pytest.approx(0.30)
    assert state["busy"] is True
    # the same host with the stolen time given back to it: others 3/20 = 15%, not busy
    state = host_state.conditions(*_pair(load=0.1, total=20.0, idle=9.0, steal=0.0, client=2.0, server=6.0))
    assert state["other_cpu_share"] == pytest.approx(0.15) and state["busy"] is False


def test_without_the_servers_process_only_the_load_average_can_tell():
    cores = os.cpu_count() or 1
    state = host_state.conditions(
        *_pair(load=0.6 * cores, total=20.0, idle=19.0, steal=0.0, client=0.5, server=math.nan)
    )
    assert math.isnan(state["other_cpu_share"]) and state["busy"] is True
    state = host_state.conditions(
        *_pair(load=0.4 * cores, total=20.0, idle=1.0, steal=0.0, client=0.5, server=math.nan)
    )
    assert state["busy"] is False


def _burn(seconds: float, server_pid: int | None = None):
    """Sample the host around ``seconds`` of a process spinning on one core; the burner's CPU
    seconds as the kernel accounts them to its parent (``wait4``), independent of ``/proc``."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # the interpreter's start-up is not part of the window
        before = host_state.sample(burner.pid if server_pid is None else server_pid)
        time.sleep(seconds)
        after = host_state.sample(burner.pid if server_pid is None else server_pid)
        first = host_state._proc_cpu_s(burner.pid)
    finally:
        burner.kill()
        _, _, usage = os.wait4(burner.pid, 0)
    return before, after, usage.ru_utime + usage.ru_stime, first


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc")
def test_a_real_burning_process_counts_as_others_unless_it_is_the_server(tmp_path):
    # not the server (a sleeping process is): the burner's core is others' time, over a quarter of
    # a host with up to 3 cores
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        before, after, burned_s, _ = _burn(1.5, server_pid=sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    state = host_state.conditions(before, after)
    total = after.cpu_total_s - before.cpu_total_s
    assert burned_s > 0.5  # it did burn
    # others include at least the burner's share of the window (the burner ran a little before
    # and after it, hence the 0.3 core-s allowance)
    assert state["other_cpu_share"] >= (min(burned_s, 1.5) - 0.3) / total
    if (os.cpu_count() or 1) <= 3:
        assert state["busy"] is True

    # the burner as the server: its CPU time is read from /proc/<pid>/stat and taken out
    before, after, burned_s, seen_s = _burn(1.5)
    state = host_state.conditions(before, after)
    total = after.cpu_total_s - before.cpu_total_s
    used = total - (after.cpu_idle_s - before.cpu_idle_s)
    assert state["server_cpu_s"] > 0.5
    assert seen_s == pytest.approx(burned_s, abs=0.3)  # /proc agrees with the kernel's rusage
    assert state["server_cpu_s"] <= burned_s + 0.05
    # whatever else ran on the host, the burner's own core-seconds are not among others'
    assert state["other_cpu_share"] <= (used - 0.5) / total
