"""The RESP command inside a Pika binlog item: its name, its key, and where its arguments end. Pure.

An item's content (bytes 34..) is a RESP array of bulk strings (`*3\r\n$3\r\nset\r\n...`); the
scanner (audit/sources/pika/binlog.py) checks every argument's length and CRLF with these helpers.
"""

from __future__ import annotations

import re
from bisect import bisect_right

# The hot loop's RESP check: an array of N >= 2 bulk strings, matched up to the key's bytes. The prefix
# (argument count, command, key length) repeats across a file, so what it says is decoded once per
# distinct prefix. Anything else (one argument, a CR in the command, ...) goes to `resp_head`.
PREFIX = re.compile(rb"\*[0-9]{1,10}\r\n\$[0-9]{1,10}\r\n[^\r]*\r\n\$[0-9]{1,10}\r\n")
PREFIX_PARTS = re.compile(rb"\*([0-9]{1,10})\r\n\$([0-9]{1,10})\r\n([^\r]*)\r\n\$([0-9]{1,10})\r\n")
Head = tuple[str, bool, int, int]
"""command name, has a key, key length, arguments after the key"""
BAD_HEAD: Head = ("", False, 0, 0)
_CRLF = b"\r\n"
_ARG = re.compile(rb"\$([0-9]{1,10})\r\n")
_PLAIN_NAME = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash


def command_name(raw: bytes) -> str:
    """The `command` column for a command's raw bytes: lower-cased, and reversible when it is not plain text.

    Command names are ASCII and case-insensitive, so a real one reads as itself in lower case. Any other
    byte (NUL, control, non-ASCII, invalid UTF-8) is written as a backslash, ``x`` and two hex digits, and
    a backslash as two, so ``codecs.escape_decode(name.encode())[0]`` gives back the lower-cased bytes.
    """
    low = raw.lower()
    if _PLAIN_NAME.fullmatch(low):
        return low.decode("ascii")
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x5C else "\\\\" if b == 0x5C else f"\\x{b:02x}" for b in low)


def resp_head(buf: bytes, c: int, e: int) -> tuple[bytes, int, int] | None:
    """Locate the first two arguments of the RESP array in buf[c:e].

    Returns (command bytes, key start, key length), key start -1 when there is one argument, or None
    when the content is not a RESP array of bulk strings: the argument count, every length and every
    CRLF must agree with the content's end (arguments after the second are checked, not kept: the digest
    covers them). Lengths are at most 10 digits (Pika's padding command writes 5, zero-padded).
    """
    array = _header(buf, c, e, 42)  # '*'
    if array is None or array[1] < 1:
        return None
    p, argc = array
    command = _header(buf, p, e, 36)  # '$'
    if command is None:
        return None
    s, n = command
    t = s + n
    if t + 2 > e or not buf.startswith(_CRLF, t):
        return None
    if argc == 1:
        return (buf[s:t], -1, 0) if t + 2 == e else None
    key = _header(buf, t + 2, e, 36)
    if key is None:
        return None
    ks, kn = key
    p = ks + kn + 2
    if p > e or not buf.startswith(_CRLF, p - 2):
        return None
    return (buf[s:t], ks, kn) if args_end(buf, p, e, argc - 2) == e else None


_DIGIT_EDGES = [10**d + d + 5 for d in range(1, 10)]  # `$N\r\n...\r\n` of d-digit N is N + d + 5 bytes
_LEAST = [0, 0, *(10**d for d in range(1, 10))]  # the least N of d digits, by d


def _header(buf: bytes, p: int, e: int, marker: int) -> tuple[int, int] | None:
    """The `<marker>N\r\n` header at buf[p]: (where what follows it starts, N), or None if it is not one
    before buf[e] (N at most 10 digits)."""
    if p >= e or buf[p] != marker:
        return None
    x = buf.find(_CRLF, p + 1, e)
    d = buf[p + 1 : x]
    if x < 0 or x - p > 11 or not d.isdigit():
        return None
    return x + 2, int(d)


def last_arg_header(size: int) -> bytes:
    """The `$N\r\n` a last bulk string of `size` bytes in all must begin with (the hot loop's check of
    the value of a three-argument command: cheaper than parsing its header)."""
    digits = bisect_right(_DIGIT_EDGES, size) + 1
    n = size - digits - 5
    return b"$%d\r\n" % n if n >= _LEAST[digits] else b"$" * (size + 1)  # else no bulk string has that size


def args_end(buf: bytes, p: int, e: int, count: int) -> int:
    """Where `count` RESP bulk strings starting at buf[p] end (-1 if they are not well-formed by buf[e])."""
    arg = _ARG.match
    for _ in range(count):
        m = arg(buf, p, e)
        if m is None:
            return -1
        p = m.end() + int(m.group(1))
        if p + 2 > e or buf[p] != 13 or buf[p + 1] != 10:
            return -1
        p += 2
    return p
