"""fusee.durations: seconds and strings like "1s", "5m", "1d" to float seconds."""

from datetime import timedelta

import pytest

from fusee.durations import parse


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (0, 0.0),
        (3, 3.0),
        (0.25, 0.25),
        ("2", 2.0),
        ("2.5", 2.5),
        ("500ms", 0.5),
        ("1s", 1.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        ("1m 30s", 90.0),
        (" 10s ", 10.0),
        (".5s", 0.5),
        (timedelta(minutes=2), 120.0),
    ],
)
def test_parse_gives_seconds(given, expected):
    """Every accepted form gives its seconds as a float."""
    actual = parse(given)
    assert expected == actual
    assert float is type(actual)


@pytest.mark.parametrize("bad", ["", "s", "5x", "1s5", "-1s", "1.2.3s", "five minutes", "1 s s"])
def test_malformed_strings_are_refused(bad):
    """A string that is not a duration raises ValueError naming it."""
    with pytest.raises(ValueError, match="not a duration"):
        parse(bad)


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), timedelta(seconds=-1)])
def test_negative_and_non_finite_are_refused(bad):
    """Negative, NaN and infinite durations raise ValueError."""
    with pytest.raises(ValueError, match="finite and >= 0"):
        parse(bad)


@pytest.mark.parametrize("bad", [None, True, [1], b"1s", object()])
def test_non_durations_are_type_errors(bad):
    """Values of other types raise TypeError."""
    with pytest.raises(TypeError):
        parse(bad)
