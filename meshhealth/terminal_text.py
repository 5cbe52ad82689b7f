"""Text from etcd or from peers, made safe to print on a terminal. Pure.

Node names, findings' evidence, degraded reasons, versions, labels and error lines are
written by other nodes (or by whoever can write etcd). Printed as they are, an ESC
starts a terminal escape sequence (retitle the window, move the cursor, hide what
follows) and a bidi override reorders what users read. `escape` shows every such
character as a visible escape instead:

- C0 controls, DEL and C1 controls: `\\x1b`, `\\x7f`, `\\x9b` (a newline and a tab too:
  one value is one line);
- bidi embeddings, overrides, isolates and marks, and the line and paragraph
  separators: `\\u202e`, `\\u2066`, `\\u200f`, `\\u2028`.

Everything else, including other non-ASCII text, is printed as it is. `escape_lines`
escapes each line of an already formatted text and keeps its line breaks. Every text
formatter that prints such values goes through one of the two.
"""

from __future__ import annotations

# Bidi controls (Unicode UAX #9) and the separators that end a line on some terminals.
_BIDI_AND_SEPARATORS = frozenset(
    {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
)


def _visible(code: int) -> str:
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


# Every character `escape` shows as an escape; wire/fields.py refuses them in etcd values.
UNSAFE_CODES: frozenset[int] = frozenset({*range(0x20), *range(0x7F, 0xA0), *_BIDI_AND_SEPARATORS})
_TABLE = {code: _visible(code) for code in sorted(UNSAFE_CODES)}


def escape(text: str) -> str:
    """`text` with control, bidi and separator characters shown as escapes."""
    return text.translate(_TABLE)


def escape_lines(text: str) -> str:
    """Each line of `text` escaped; its line breaks (\\n) kept."""
    return "\n".join(escape(line) for line in text.split("\n"))
