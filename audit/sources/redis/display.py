"""Bytes as text an operator (and redis-cli) can read back: redis-cli's own quoting.

`"user:1"`, `"a\\"b"`, `"\\x00\\xff"`: printable ASCII as is, `\\` and `"` escaped, `\\n \\r \\t \\a \\b`,
every other byte `\\xHH`, in double quotes. This is the form redis-cli prints and parses
(sdscatrepr / sdssplitargs), so a quoted key pasted after a command in redis-cli is that exact key.
"""

from __future__ import annotations

SHORT_VALUE_BYTES = 64
"""Values up to this many bytes are shown in findings and reports (unless `show_values: false`)."""

_SPECIAL = {ord("\\"): "\\\\", ord('"'): '\\"', 10: "\\n", 13: "\\r", 9: "\\t", 7: "\\a", 8: "\\b"}
_TABLE = [_SPECIAL.get(b, chr(b) if 32 <= b < 127 else f"\\x{b:02x}") for b in range(256)]


def quote(data: bytes) -> str:
    """redis-cli's quoted form of `data`."""
    return '"' + "".join([_TABLE[b] for b in data]) + '"'


def short_value(data: bytes | None, *, show: bool = True, limit: int = SHORT_VALUE_BYTES) -> str | None:
    """The quoted value when shown and short enough, else None (the finding then holds sizes only)."""
    if data is None or not show or len(data) > limit:
        return None
    return quote(data)


def unquote(text: str) -> bytes:
    """The inverse of :func:`quote` (for tests and for tools reading a repair plan)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError(f"not a quoted string: {text[:40]!r}")
    out = bytearray()
    body = text[1:-1]
    i = 0
    simple = {"n": 10, "r": 13, "t": 9, "a": 7, "b": 8, "\\": 92, '"': 34}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("latin-1")
            i += 1
        elif body[i + 1] == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append(simple[body[i + 1]])
            i += 2
    return bytes(out)
