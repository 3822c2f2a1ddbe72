"""The benchmarks' regression guard (bench/_harness.py): what fails a quick run, what does not."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("bench_harness", ROOT / "bench" / "_harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _rate(h, ratio: float, *, target: float = 1.0, margin: float | None = None, key: str = "r"):
    """A rate result (higher is better) whose ensemble/peer ratio is ``ratio``."""
    return h.Result(key, "1", "a rate", 10, "msgs/s", ratio * 100.0, "peer", 100.0,
                    h.Target("ratio>=", target, "t", margin=margin))


def _time(h, ratio: float, *, key: str = "t"):
    """A time result (lower is better) whose ensemble/peer ratio is ``ratio``."""
    return h.Result(key, "2", "a time", 10, "s", ratio * 1.0, "peer", 1.0, h.Target("ratio<=", 1.0, "t"))


def test_a_halved_rate_fails_even_while_its_target_is_met(harness):
    base = harness._figures([_rate(harness, 4.0)])
    assert [] == harness.guard([_rate(harness, 3.0)], base)  # within the margin
    lines = harness.guard([_rate(harness, 2.0)], base)  # halved: still >= the 1.0 target
    assert len(lines) == 1 and "2x worse" in lines[0].replace("2.00x", "2x")


def test_a_doubled_time_fails_and_a_faster_one_never_does(harness):
    base = harness._figures([_time(harness, 0.8)])
    assert harness.guard([_time(harness, 1.6)], base)
    assert [] == harness.guard([_time(harness, 0.1)], base)
    assert [] == harness.guard([_time(harness, 0.8 * harness.NOISE_MARGIN * 0.99)], base)


def test_the_margin_is_below_a_halving_and_a_measurement_may_widen_its_own(harness):
    assert 1.0 < harness.NOISE_MARGIN < 2.0
    base = harness._figures([_rate(harness, 4.0)])
    assert [] == harness.guard([_rate(harness, 2.0, margin=2.5)], base)


def test_no_baseline_or_no_target_guards_nothing(harness):
    assert [] == harness.guard([_rate(harness, 0.01)], None)
    assert [] == harness.guard([_rate(harness, 0.01, key="new")], harness._figures([_rate(harness, 4.0)]))
    informative = harness.Result("r", "1", "info", 10, "msgs/s", 1.0, "erlang", 100.0)
    assert [] == harness.guard([informative], harness._figures([_rate(harness, 4.0)]))


def test_results_round_trip_through_their_file_and_a_damaged_file_reads_as_none(harness, tmp_path):
    path = str(tmp_path / "sub" / "b.quick.json")
    harness.write_results(path, "b", [_rate(harness, 4.0)], {"mode": "quick"})
    got = harness.read_results(path)
    assert got["r"]["ratio"] == pytest.approx(4.0) and got["r"]["lower_is_better"] is False
    assert json.loads(Path(path).read_text())["mode"] == "quick"
    Path(path).write_text('{"results": ')
    assert harness.read_results(path) is None
    assert harness.read_results(str(tmp_path / "absent.json")) is None


def test_every_committed_baseline_reads(harness):
    """Each bench/results/*.quick.json the guard compares with is readable and names ratios."""
    found = sorted((ROOT / "bench" / "results").glob("*.quick.json"))
    for path in found:
        got = harness.read_results(str(path))
        assert got, path
        assert any(isinstance(v.get("ratio"), float) for v in got.values()), path


def test_better_keeps_the_better_ratio_in_each_direction(harness):
    assert harness.better(_rate(harness, 2.0), _rate(harness, 3.0)).ratio == pytest.approx(3.0)
    assert harness.better(_time(harness, 2.0), _time(harness, 3.0)).ratio == pytest.approx(2.0)


def test_a_recorded_baseline_is_the_median_of_its_runs(harness):
    runs = [[_rate(harness, x)] for x in (1.0, 9.0, 2.0)]
    assert harness.median_figures(runs)["r"]["ratio"] == pytest.approx(2.0)


def _fake_bench(harness, ratios):
    """A benchmark whose one measurement answers the next ratio of ``ratios`` each time it runs."""
    it = iter(ratios)

    def measure(quick, reps):
        return [_rate(harness, next(it))]

    return {"1": measure}


def test_a_quick_run_fails_only_when_the_regression_repeats(harness, tmp_path, monkeypatch, capsys):
    """Against a baseline of 4.0: one noisy 1.0 measured again as 3.9 passes; 1.0 three times fails."""
    monkeypatch.setattr(harness, "RESULTS_DIR", str(tmp_path))
    assert 0 == harness.run("fake", "doc", _fake_bench(harness, [4.0, 4.1, 3.9]), ["--quick", "--record"])
    assert harness.read_results(str(tmp_path / "fake.quick.json"))["r"]["ratio"] == pytest.approx(4.0)
    assert 0 == harness.run("fake", "doc", _fake_bench(harness, [1.0, 3.9]), ["--quick"])
    assert "measuring again" in capsys.readouterr().out
    assert 1 == harness.run("fake", "doc", _fake_bench(harness, [1.0, 1.0, 1.0]), ["--quick"])
    assert "REGRESSION" in capsys.readouterr().out
    assert 0 == harness.run("fake", "doc", _fake_bench(harness, [1.0, 1.0, 1.0]), ["--quick", "--no-guard"])


def test_repeated_runs_show_each_ratio_range(harness):
    runs = [[_rate(harness, 2.0), _time(harness, 1.0)], [_rate(harness, 3.0), _time(harness, 0.5)]]
    spreads = harness.ratio_spreads(runs)
    assert spreads["r"] == pytest.approx((2.0, 3.0)) and spreads["t"] == pytest.approx((0.5, 1.0))
    table = harness.markdown_table(runs[-1], spreads)
    assert "ratio over runs" in table and "2.00-3.00x" in table and "0.50-1.00x" in table
