"""Durations the way Go (and so cilium-health) prints them: 412.5µs, 1.02ms, 2.7ms, 1.5s.

Like Go's `time.Duration.String()` (units ns, µs, ms, s; `1m30s`, `1h2m3s` past a
minute; `0s` for zero), but rounded to 4 significant digits so RTTs stay readable
(Go would print `1.023456ms`; we print `1.023ms`). Trailing zeros are dropped.
"""

from __future__ import annotations

import math

_SIG_DIGITS = 4


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
