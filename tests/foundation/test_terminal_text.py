"""Text from etcd and peers printed to a terminal: every control shown as an escape."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.terminal_text import escape, escape_lines


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        pytest.param("node-1", "node-1", id="plain"),
        pytest.param("nœud Ünïcode ✓ 東京", "nœud Ünïcode ✓ 東京", id="non-ASCII text stays"),
        pytest.param("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07", id="window title"),
        pytest.param("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H", id="clear screen"),
        pytest.param("ok\rFAKE", "ok\\x0dFAKE", id="carriage return"),
        pytest.param("a\nb\tc", "a\\x0ab\\x09c", id="newline and tab"),
        pytest.param("\x00\x7f", "\\x00\\x7f", id="NUL and DEL"),
        pytest.param("\x9b31m", "\\x9b31m", id="C1 CSI"),
        pytest.param("\x85", "\\x85", id="C1 next line"),
        pytest.param("abc\u202edcba", "abc\\u202edcba", id="right-to-left override"),
        pytest.param("\u2066x\u2069", "\\u2066x\\u2069", id="isolates"),
        pytest.param("\u200f\u061c", "\\u200f\\u061c", id="marks"),
        pytest.param("a\u2028b", "a\\u2028b", id="line separator"),
        pytest.param("back\\slash", "back\\slash", id="a backslash is kept"),
    ],
)
def test_escape(raw: str, shown: str) -> None:
    assert escape(raw) == shown


def test_escape_lines_keeps_line_breaks_only() -> None:
    assert escape_lines("one \x1b[31m\ntwo\u202e\n") == "one \\x1b[31m\ntwo\\u202e\n"


@given(st.text())
def test_nothing_printed_can_control_the_terminal(text: str) -> None:
    shown = escape(text)
    assert all(
        ch >= " "
        and not ("\x7f" <= ch <= "\x9f")
        and ch not in "\u202a\u202b\u202c\u202d\u202e"
        and ch not in "\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u2028\u2029"
        for ch in shown
    )
    if all(" " <= ch < "\x7f" for ch in text):
        assert shown == text  # printable ASCII is printed as it is
