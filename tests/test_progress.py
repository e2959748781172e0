"""Progress bars: off unless asked or long on a terminal, counting every request or stage once."""

from __future__ import annotations

import sys

import pytest

from toolkit._planning import planner
from toolkit._queueing import simulator

SIM = dict(
    model="Llama-3.2-1B",
    gpu="H100 SXM",
    quant="fp16",
    prompt_tokens=200,
    output_tokens=20,
    num_requests=40_000,
    arrival_rate=400.0,
)
PLAN = dict(arrival_rate=3, prompt_tokens=512, output_tokens=128, slo_e2e_ms=5000, models=["Llama-3.1-8B"])


class _Recorder:
    """Stands in for the bar: records each update."""

    def __init__(self, total: int):
        self.total, self.n, self.updates, self.closed = total, 0, [], False

    def update(self, n: int = 1) -> None:
        self.n += n
        self.updates.append(n)

    def close(self) -> None:
        self.closed = True


def _record(monkeypatch, module) -> list:
    bars, made = [], module.progress_bar

    def spy(progress, *, long, total, desc, unit):
        made(progress, long=long, total=total, desc=desc, unit=unit)  # checks the argument
        bars.append((long, _Recorder(total)))
        return bars[-1][1]

    monkeypatch.setattr(module, "progress_bar", spy)
    return bars


def test_simulation_counts_requests_in_ticks_and_closes_the_bar(monkeypatch):
    bars = _record(monkeypatch, simulator)
    simulator.simulate(**SIM, progress=False)
    ((long, bar),) = bars
    # 40,000 requests: two ticks of 16,384 in the loop, the 7,232 left at the end
    assert not long and bar.updates == [16_384, 16_384, 7_232] and bar.n == bar.total == 40_000 and bar.closed


def test_closed_loop_simulation_counts_every_request(monkeypatch):
    bars = _record(monkeypatch, simulator)
    kwargs = {**SIM, "arrival_rate": None, "concurrency": 32, "num_requests": 20_000}
    simulator.simulate(**kwargs)
    ((_, bar),) = bars
    assert bar.updates == [16_384, 3_616] and bar.closed


def test_long_simulations_and_plans_are_flagged_long(monkeypatch):
    monkeypatch.setattr(simulator, "LONG_REQUESTS", 30_000)
    bars = _record(monkeypatch, simulator)
    simulator.simulate(**SIM)
    simulator.simulate(**{**SIM, "num_requests": 20_000})
    assert [long for long, _ in bars] == [True, False]

    bars = _record(monkeypatch, planner)
    planner.plan(**PLAN)
    planner.plan(**{**PLAN, "models": None})  # the whole catalog: over 2,000 combinations
    assert [long for long, _ in bars] == [False, True]
    assert all(bar.updates == [1, 1] and bar.closed for _, bar in bars)


def test_a_bar_is_drawn_only_when_asked_or_long_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(simulator, "LONG_REQUESTS", 30_000)
    run = lambda **kw: simulator.simulate(**{**SIM, "num_requests": 35_000, **kw})  # noqa: E731
    run()  # long, but stderr is not a terminal
    run(progress=False)
    assert capsys.readouterr().err == ""
    run(progress=True)
    assert "simulate" in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    run()
    assert "req" in capsys.readouterr().err
    run(progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("call", ["simulate", "plan"])
@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_progress_must_be_a_bool_or_none(call, value):
    with pytest.raises(ValueError, match="progress"):
        if call == "simulate":
            simulator.simulate(**{**SIM, "num_requests": 10}, progress=value)
        else:
            planner.plan(**PLAN, progress=value)
