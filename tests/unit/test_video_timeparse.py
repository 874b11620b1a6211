"""parse_time: every accepted form and every rejected one, with hand-computed seconds."""

import math

import pytest

from paravt_core.video import InvalidTimeError, parse_time
from paravt_core.video.timeparse import shown


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


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (604800, 604800.0),  # a week, the largest time, as an int
        ("12.5s", 12.5),
        (" 12.5 S ", 12.5),  # unit in any case, spaces around
        ("1:02:03.5", 3723.5),  # (1 x 60 + 2) x 60 + 3.5
        ("1:2:3", 3723.0),
        ("59:59.9", 3599.9),
        ("60:00", 3600.0),  # MM:SS: the minutes are not bounded without hours
        ("1e3", 1000.0),
        (".5", 0.5),
        ("+3", 3.0),
        ("3.", 3.0),
        ("5s", 5.0),  # one digit before the unit
        (".5s", 0.5),  # a number that starts with its point
    ],
)
def test_parse_time_values_by_hand(value, seconds) -> None:
    assert parse_time(value, "t") == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "t is missing"),
        (True, "t must be a number of seconds, got True"),
        (-(10**400), "t must not be negative, got (an integer of about 401 digits)"),
        (10**400, "t (an integer of about 401 digits) is too large (at most 604800 seconds)"),
        (10**6, "t 1000000 is too large (at most 604800 seconds)"),
        (-5, "t must not be negative, got -5"),
        (-604800, "t must not be negative, got -604800"),
        ([1], "t must be a number of seconds, got list [1]"),
        (float("nan"), "t must be a finite number, got nan"),
        (float("inf"), "t must be a finite number, got inf"),
        (604800.5, "t 604800.5 is too large (at most 604800 seconds)"),
        ("1:60:00", "t '1:60:00': minutes must be below 60"),
        ("0:60", "t '0:60': seconds must be below 60"),
        ("abc", "t must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 'abc'"),
        ("s", "t must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 's'"),
    ],
)
def test_parse_time_messages_by_hand(value, message: str) -> None:
    with pytest.raises(InvalidTimeError) as info:
        parse_time(value, "t")
    assert str(info.value) == message


def test_parse_time_names_a_time_by_default() -> None:
    with pytest.raises(InvalidTimeError, match="^time is missing$"):
        parse_time(None)


def test_a_time_string_over_40_characters_is_refused_before_reading() -> None:
    """41 characters (the bound is 40, after stripping): refused, the echo shortened by reprlib."""
    with pytest.raises(InvalidTimeError) as info:
        parse_time("1" * 41, "t")
    text = str(info.value)
    assert text.startswith("t '11111") and "..." in text
    assert text.endswith("' is too long for a time (seconds, e.g. 12.5, or MM:SS or HH:MM:SS)")
    assert parse_time(" " + "0" * 39 + "1 ", "t") == 1.0  # 40 characters after stripping: read


def test_shown_bounds_what_it_echoes() -> None:
    # reprlib with maxstring 40: a repr of up to 40 characters whole, longer ones cut to 18 + "..." + 19
    assert shown("y" * 38) == "'" + "y" * 38 + "'"
    assert shown("y" * 39) == "'" + "y" * 17 + "..." + "y" * 18 + "'"
    assert shown([[[[1]]]]) == "[[[[...]]]]"  # nesting beyond 3 levels elided
    # 130 bits: int(130 x 0.30103) + 1 = int(39.13) + 1 = 40 ("about": 2**129 has 39 digits)
    assert shown(2**129) == "(an integer of about 40 digits)"
    assert shown(2**127) == str(2**127)  # 128 bits: shown (39 digits, under the 40-character bound)
    assert shown(2**128) == "(an integer of about 39 digits)"  # 129 bits: int(38.83) + 1 = 39
    # a huge int inside a list: its repr raises ValueError (over 4300 digits), the list is described
    assert shown([10**5000]) == "(a list too large to show)"
    # whole up to 42 characters (a reprlib-bounded repr plus its quotes), else the first 40 + "..."
    two = ["y" * 17, "y" * 17]  # "['" + 17 + "', '" + 17 + "']" = 42 characters
    assert len(repr(two)) == 42 and shown(two) == repr(two)
    longer = ["y" * 18, "y" * 17]  # 43 characters
    assert shown(longer) == repr(longer)[:40] + "..."


@pytest.mark.parametrize("text", ["1:60", "0:60", "1:60.0", "1:60:00", "0:00:60"])
def test_sixty_is_not_a_valid_second_or_minute(text: str) -> None:
    with pytest.raises(InvalidTimeError, match="must be below 60"):
        parse_time(text)


@pytest.mark.parametrize(("text", "seconds"), [("1:59", 119.0), ("1:59.5", 119.5), ("1:59:59", 7199.0)])
def test_just_below_sixty_is_a_time(text: str, seconds: float) -> None:
    assert parse_time(text) == seconds  # 60 + 59; 60 + 59.5; 3600 + 59 x 60 + 59
