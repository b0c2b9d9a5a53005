"""Text from a user's file, made safe to show: a C0 or C1 control character or DEL (an escape
sequence that sets a window title, clears the screen or moves the cursor over the numbers) is
refused where the file is read (``check``), and written as visible text (``\\x1b``) wherever
text is shown (``escape``), as a second guard. So are the invisible characters that reorder or
hide what a terminal shows (a right-to-left override, zero-width spaces: ``\\u202e``)."""
from __future__ import annotations

import re

from .errors import CostcalcError, quote

# Invisible characters that change what a terminal shows: bidirectional overrides and
# isolates, zero-width characters, line and paragraph separators, the byte-order mark.
_FORMAT = "\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMAT}]")
_NOT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_FORMAT}]")


def _visible(char: str) -> str:
    """One character as a Python escape (``\\n``, ``\\x1b``, ``\\u202e``)."""
    return repr(char)[1:-1]


def escape(text: str, lines: bool = False) -> str:
    """``text`` with each control character as a Python escape; ``lines``: newlines kept (a whole
    rendered text, whose lines are its own)."""
    pattern = _NOT_NEWLINE if lines else CONTROL
    return pattern.sub(lambda m: _visible(m.group()), text) if pattern.search(text) else text


def check(origin: str, field: str, text: str) -> str:
    """``text`` itself, or an error naming the field when it holds a control character."""
    if CONTROL.search(text):
        raise CostcalcError(f"{origin}: field {field} holds a control character ({quote(text)}); "
                            f"titles and names are plain text")
    return text


def check_all(origin: str, data: object) -> None:
    """Refuse a control character in any text of a file's JSON (a key or a string, at any
    depth), naming where it is: a preset's or device's text is shown as written."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            check(origin, quote(where), value)
        elif isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                if CONTROL.search(str(key)):
                    raise CostcalcError(f"{origin}: a field name holds a control character ({quote(key)}); "
                                        f"names are plain text")
                stack.append((path, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
