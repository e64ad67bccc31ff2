"""Error types shared by the library and the CLI.

``BadInput`` is raised for anything a user can fix (a missing folder, a malformed
annotation, an invalid submission row). The CLI turns it into one line on stderr
and exit status 2; every other exception is an internal error (exit 1).
"""

from __future__ import annotations


class BadInput(ValueError):
    """A problem with user-supplied input. ``where`` names the file/row/field.

    >>> str(BadInput("box has zero area", where="ann/0001.xml"))
    'ann/0001.xml: box has zero area'
    """

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


class VerificationError(BadInput):
    """A dataset repo whose files do not match its manifest."""
