"""parse_time: every accepted form and every rejected one, with hand-computed seconds."""

import math

import pytest

from paravt_core.video import InvalidTimeError, parse_time


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (12, 12.0),
        (12.5, 12.5),
        ("12", 12.0),
        (" 12.5 ", 12.5),
        ("12.5s", 12.5),
        (".5", 0.5),
        ("1e2", 100.0),
        ("01:30", 90.0),
        ("1:30.5", 90.5),
        ("75:00", 4500.0),  # MM:SS with more than 59 minutes is still unambiguous
        ("01:02:03", 3723.0),
        ("0:00:07.25", 7.25),
    ],
)
def test_parse_time_accepts(value, seconds):
    assert parse_time(value) == seconds


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (None, "missing"),
        (True, "number"),
        ([1], "number"),
        ({"t": 1}, "number"),
        (-1, "negative"),
        ("-5", "negative"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        ("1e400", "finite"),
        ("nan", "MM:SS"),
        ("abc", "MM:SS"),
        ("", "MM:SS"),
        ("1:75", "seconds must be below 60"),
        ("1:60:00", "minutes must be below 60"),
        ("1:2:3:4", "MM:SS"),
        (1e12, "too large"),
    ],
)
def test_parse_time_rejects(value, needle):
    with pytest.raises(InvalidTimeError) as info:
        parse_time(value, "start_time")
    assert needle in str(info.value)
    assert "start_time" in str(info.value)


def test_parse_time_error_is_value_error():
    with pytest.raises(ValueError):
        parse_time("soon")
