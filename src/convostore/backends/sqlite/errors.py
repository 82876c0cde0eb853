"""Where sqlite3 errors end: each becomes convostore's."""

from __future__ import annotations

import sqlite3

from convostore.errors import BackendUnavailableError, InvalidArgumentError, StoreError

__all__ = ["store_error", "translate_error"]

# Primary result codes that mean the database cannot be used as it is now: busy or
# locked past the timeout, an I/O error, a full disk, or a file that cannot be opened
# (missing, not readable or writable, not a database). Every other code (a syntax error,
# a missing table or column, a constraint) is a bug or bad data: a plain StoreError, so
# that nothing mistakes it for a database that is merely out of reach.
_UNAVAILABLE_CODES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_NOTADB,
    }
)


def store_error(error: sqlite3.Error | UnicodeEncodeError, where: str) -> StoreError:
    """`translate_error`, and a string sqlite3 cannot bind (it holds a lone surrogate)
    as `InvalidArgumentError`."""
    if isinstance(error, UnicodeEncodeError):
        return InvalidArgumentError(f"text that is not valid Unicode: {error}")
    return translate_error(error, where)


def translate_error(error: sqlite3.Error, where: str) -> StoreError:
    """The convostore error to raise (``from error``) for a sqlite3 error:
    `BackendUnavailableError` for the result codes above, else `StoreError`."""
    code: int | None = getattr(error, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _UNAVAILABLE_CODES:
        return BackendUnavailableError(f"{where}: {error}")
    return StoreError(f"{where}: {error}")
