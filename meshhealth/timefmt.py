"""Every time stamp and duration users read, in one place (pure).

    format_duration(0.0004125)   '412.5µs'   an RTT, an interval, a round's length
    format_interval(35.4)        '35s'       a duration, whole seconds past one second
    format_age(125)              '2m5s'      how long ago, whole seconds, two units
    format_age_short(125)        '2m'        how long ago, one unit (narrow columns)
    iso_time(1795000000)         '2026-11-18T11:06:40Z'
    parse_iso_time('2026-11-18T11:06:40Z')   1795000000.0
    parse_duration('1h30m')      5400.0      a duration users type (`--since 2h`)

Durations are printed the way Go (and so cilium-health) prints them: like Go's
`time.Duration.String()` (units ns, µs, ms, s; `1m30s`, `1h2m3s` past a minute; `0s` for
zero), but rounded to 4 significant digits so RTTs stay readable (Go would print
`1.023456ms`; we print `1.023ms`). Trailing zeros are dropped.

Time stamps are RFC 3339 in UTC with whole seconds and a `Z`: what every document
(status, matrix, feed) carries and every text output prints.
"""

from __future__ import annotations

import datetime as dt
import math
import re

_SIG_DIGITS = 4
_ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION_RE = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?[dhms])+")
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([dhms])")


def _trim(value: float, sig_digits: int = _SIG_DIGITS) -> str:
    """`value` (0 < value < 1000) with `sig_digits` significant digits, no trailing 0s."""
    int_digits = len(str(int(value))) if value >= 1 else 1
    decimals = max(sig_digits - int_digits, 0)
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_duration(seconds: float) -> str:
    """Go-like text for a duration in seconds (`412.5µs`, `1.02ms`, `1.5s`, `2m5s`)."""
    if math.isnan(seconds):
        return "NaN"
    if math.isinf(seconds):
        return "-inf" if seconds < 0 else "inf"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    # Round to 4 significant digits first so 999.96µs becomes 1ms, not 1000µs.
    magnitude = math.floor(math.log10(ns))
    step = 10 ** max(magnitude - _SIG_DIGITS + 1, 0)
    ns = (ns + step // 2) // step * step  # half away from zero, as Go's Round
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return _trim(ns / 1e3) + "µs"
    if ns < 1_000_000_000:
        return _trim(ns / 1e6) + "ms"
    if ns < 60 * 1_000_000_000:
        return _trim(ns / 1e9) + "s"
    # Past a minute: Go's h/m/s form, whole seconds are plenty at this scale.
    total_s = round(ns / 1e9)
    hours, rest = divmod(total_s, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s"


def format_interval(seconds: float) -> str:
    """`format_duration` rounded to whole seconds from one second up (`35s`, `2m5s`);
    below a second as it is (`500ms`): a report's age next to its probe interval."""
    return format_duration(round(seconds) if seconds >= 1 else seconds)


def format_age(seconds: float) -> str:
    """`3s`, `2m5s`, `1h2m`, `3d4h`: how long ago, whole seconds (negative: `0s`)."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def format_age_short(seconds: float) -> str:
    """`3s`, `2m`, `1h`: how long ago in one unit (seconds below 2 minutes, minutes
    below 2 hours, else hours), truncated; negative: `0s`."""
    total = max(0, int(seconds))
    if total < 120:
        return f"{total}s"
    if total < 7200:
        return f"{total // 60}m"
    return f"{total // 3600}h"


def iso_time(unix_s: float | None) -> str | None:
    """`2026-11-22T10:00:00Z` (UTC, whole seconds, truncated), None for None."""
    if unix_s is None:
        return None
    return dt.datetime.fromtimestamp(int(unix_s), tz=dt.UTC).strftime(_ISO_FORMAT)


def parse_iso_time(text: str) -> float:
    """Unix seconds of an ISO 8601 / RFC 3339 time (`Z` or an offset; none means UTC):
    the inverse of `iso_time`. ValueError for anything else."""
    stamp = dt.datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def parse_when(text: str, now: float) -> float:
    """Unix seconds of a `--since`/`--at` value: a duration back from `now` (2h), or a
    time (ISO 8601; no zone: UTC). ValueError naming the value."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        return parse_iso_time(text)
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: use a duration back from now (2h, 30m) or an ISO 8601 "
            "time (2026-11-27T03:12Z)"
        ) from None


def parse_duration(text: str) -> float:
    """Seconds of a duration such as `2h`, `90s`, `1h30m`, `7d`, `1.5h` (units d, h,
    m, s). ValueError naming the text for anything else."""
    if not _DURATION_RE.fullmatch(text):
        raise ValueError(
            f"invalid duration {text!r}: use a number and a unit, d, h, m or s (2h, 1h30m)"
        )
    return sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART_RE.findall(text))
