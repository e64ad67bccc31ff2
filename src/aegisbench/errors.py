"""Error types shared by the library and the CLI.

``BadInput`` is raised for anything a user can fix (a missing folder, a malformed
annotation, an invalid submission row). The CLI turns it into one line on stderr
and exit status 2; every other exception is an internal error (exit 1).

Messages quote user-supplied text (file names, ids, values), so :func:`printable`
makes every message one safe line: control characters (newline, CR, ESC, other C0/C1),
line and paragraph separators, bidirectional overrides and lone surrogates (the bytes of
a non-UTF-8 file name) are escaped, and a message longer than :data:`MAX_MESSAGE_CHARS`
is cut with a note of its full length.

>>> printable("a\\nb\\x1b[31m" + "\\udcff")
'a\\\\nb\\\\x1b[31m\\\\xff'
>>> printable("x" * 1000, limit=20)
'xxxx... (1000 chars)'
"""

from __future__ import annotations

import contextlib
import re

#: Longest message line (characters) the library and the CLI print: room for a list of
#: failures, none for a value copied from a hostile file (values quoted in submission
#: messages are cut shorter where they are quoted).
MAX_MESSAGE_CHARS = 1000
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    c = match.group()
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte of a non-UTF-8 name
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as one line of at most ``limit`` characters, unsafe characters escaped."""
    text = str(text)
    note = f"... ({len(text)} chars)"
    out = _UNSAFE.sub(_escape, text[: limit + 1])
    if len(text) <= limit and len(out) <= limit:
        return out
    return out[: max(0, limit - len(note))] + note


class BadInput(ValueError):
    """A problem with user-supplied input. ``where`` names the file/row/field.

    >>> str(BadInput("box has zero area", where="ann/0001.xml"))
    'ann/0001.xml: box has zero area'
    >>> str(BadInput("not found", where="sub\\nINFO forged"))
    'sub\\\\nINFO forged: not found'
    """

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        self.message = message
        super().__init__(printable(f"{where}: {message}" if where else message))


class VerificationError(BadInput):
    """A dataset repo whose files do not match its manifest."""


@contextlib.contextmanager
def as_bad_input(where: str | None):
    """A ``TypeError`` or ``ValueError`` raised inside (a parameter class refusing a value the user
    gave) leaves as :class:`BadInput` located at ``where``.

    >>> with as_bad_input("--tile"):
    ...     int("x")
    Traceback (most recent call last):
    ...
    aegisbench.errors.BadInput: --tile: invalid literal for int() with base 10: 'x'
    """
    try:
        yield
    except (TypeError, ValueError) as exc:
        raise BadInput(str(exc), where=where) from None
