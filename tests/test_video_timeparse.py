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


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (10**309, "too large"),  # float(10**309) raises OverflowError
        (-(10**309), "negative"),
        (10**4400, "too large"),  # repr() of an int over 4300 digits raises ValueError
        ("1" * 310, "too long"),  # a 310-digit string
        ("9" * 5000, "too long"),  # int("9" * 5000) raises ValueError (4300-digit limit)
        ("1" * 5000 + ":00", "too long"),  # MM:SS whose minutes would go through int()
        ("00:" * 2000 + "1", "too long"),
        (604801, "too large"),  # a week plus one second (MAX_SECONDS = 7 * 24 * 3600 = 604800)
    ],
    ids=[
        "int-309-digits",
        "neg-int-309",
        "int-4400-digits",
        "str-310",
        "str-5000",
        "clock-5000",
        "clock-6001",
        "week+1",
    ],
)
def test_overflowing_times_are_invalid_time_errors(value, needle):
    with pytest.raises(InvalidTimeError) as info:
        parse_time(value, "start_time")
    message = str(info.value)
    assert needle in message and "start_time" in message
    assert len(message) < 200  # the huge value is not echoed back


def test_largest_accepted_time():
    assert parse_time(604800) == 604800.0
    assert parse_time("167:59:59.5") == 604799.5  # 167 h 59 min 59.5 s (16 characters)


def _nested(depth: int) -> list:
    outer: list = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


@pytest.mark.parametrize(
    "value",
    [[10**5000], _nested(5000), {"t": "x" * 10_000}],
    ids=["list-with-5000-digit-int", "nested-5000-deep", "dict-with-long-string"],
)
def test_unprintable_arguments_still_give_a_short_message(value):
    # repr() of the first raises ValueError, of the second RecursionError: the message must not.
    with pytest.raises(InvalidTimeError, match="start_time must be a number of seconds") as info:
        parse_time(value, "start_time")
    assert len(str(info.value)) < 200
