"""meshhealth.timefmt: every duration, age and time stamp users read (pure)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.timefmt import (
    format_age,
    format_age_short,
    format_duration,
    format_interval,
    iso_time,
    parse_iso_time,
)

UNIT_S = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
PART = re.compile(r"(\d+(?:\.\d+)?)(ns|µs|ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds of a text the formatters print (the parts must cover the whole text)."""
    parts = PART.findall(text)
    assert "".join(number + unit for number, unit in parts) == text, text
    return sum(float(number) * UNIT_S[unit] for number, unit in parts)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (1e-9, "1ns"),
        (0.000000999, "999ns"),
        (0.000001, "1µs"),
        (0.0000015, "1.5µs"),
        (0.00041, "410µs"),
        (0.0004125, "412.5µs"),
        (0.000455, "455µs"),
        (0.00099996, "1ms"),  # rounded before the unit is chosen: not 1000µs
        (0.00102, "1.02ms"),
        (0.0010234567, "1.023ms"),
        (0.0027, "2.7ms"),
        (0.030, "30ms"),
        (0.12345, "123.5ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (59.99, "59.99s"),
        (90.0, "1m30s"),
        (3725.0, "1h2m5s"),
        (-0.0015, "-1.5ms"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (math.nan, "NaN"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.floats(min_value=1e-9, max_value=1e7))
def test_format_duration_keeps_four_significant_digits(seconds: float) -> None:
    text = format_duration(seconds)
    # Past a minute the 4 digits are shown in whole seconds (`1h2m5s`).
    whole_s = 0.5 if seconds >= 59.995 else 0.0
    tolerance_s = max(5.01e-4 * seconds, 0.51e-9) + whole_s
    assert abs(parse_duration(text) - seconds) <= tolerance_s, text
    if seconds >= 60:
        assert re.fullmatch(r"(\d+h)?\d+m\d+s", text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.5, "500ms"), (0.9996, "999.6ms"), (1.0, "1s"), (35.4, "35s"), (125.6, "2m6s")],
)
def test_format_interval(seconds: float, text: str) -> None:
    assert format_interval(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (2.6, "3s"),
        (59, "59s"),
        (60, "1m0s"),
        (125, "2m5s"),
        (3725, "1h2m"),
        (49 * 3600, "2d1h"),
        (-5, "0s"),
    ],
)
def test_format_age(seconds: float, text: str) -> None:
    assert format_age(seconds) == text


@given(st.floats(min_value=0.0, max_value=1e8))
def test_format_age_is_at_most_one_unit_short(seconds: float) -> None:
    text = format_age(seconds)
    smallest_unit_s = UNIT_S[PART.findall(text)[-1][1]]
    assert round(seconds) - smallest_unit_s < parse_duration(text) <= round(seconds)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-3, "0s"), (0.9, "0s"), (119.9, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h")],
)
def test_format_age_short(seconds: float, text: str) -> None:
    assert format_age_short(seconds) == text


@pytest.mark.parametrize(
    ("unix_s", "text"),
    [
        (0.0, "1970-01-01T00:00:00Z"),
        (1_795_341_600.9, "2026-11-22T10:00:00Z"),  # truncated, not rounded
        (None, None),
    ],
)
def test_iso_time(unix_s: float | None, text: str | None) -> None:
    assert iso_time(unix_s) == text


@pytest.mark.parametrize(
    ("text", "unix_s"),
    [
        ("2026-11-22T10:00:00Z", 1_795_341_600.0),
        ("2026-11-22T11:00:00+01:00", 1_795_341_600.0),
        ("2026-11-22T10:00:00", 1_795_341_600.0),  # no offset: UTC
        ("2026-11-22T10:00:00.5Z", 1_795_341_600.5),
    ],
)
def test_parse_iso_time(text: str, unix_s: float) -> None:
    assert parse_iso_time(text) == unix_s


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z"])
def test_parse_iso_time_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso_time(text)


@given(st.floats(min_value=0.0, max_value=4e9))
def test_iso_time_round_trips_to_the_whole_second(unix_s: float) -> None:
    text = iso_time(unix_s)
    assert text is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text)
    assert parse_iso_time(text) == float(int(unix_s))
