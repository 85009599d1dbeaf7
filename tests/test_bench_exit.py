"""``python -m benchmarks`` (``make bench``) fails when a figure misses its goal, so CI can gate on it."""

from __future__ import annotations

import sys
import types

import pytest

from benchmarks.__main__ import main


@pytest.fixture
def bench(monkeypatch):
    def install(*results):
        module = types.ModuleType("benchmarks.bench_probe")
        module.run = lambda: list(results)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "benchmarks.bench_probe", module)

    return install


def test_a_figure_that_misses_its_goal_makes_the_run_exit_non_zero(bench, capsys):
    bench(
        {"name": "kept", "ratio": 0.4, "goal": "<= 0.6", "detail": ""},
        {"name": "missed", "ratio": 1.6, "goal": "<= 1.5", "detail": ""},
    )
    assert main(["bench_probe"]) == 1
    assert "MISSES: missed: 1.600 (goal <= 1.5)" in capsys.readouterr().out


def test_every_figure_meeting_its_goal_exits_zero(bench):
    bench(
        {"name": "floor", "ratio": 1.0, "goal": ">= 1.0", "detail": ""},
        {"name": "cap", "ratio": 0.6, "goal": "<= 0.6", "detail": ""},
    )
    assert main(["bench_probe"]) == 0
