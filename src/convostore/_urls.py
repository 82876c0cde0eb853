"""Store URLs as they may be shown: in a repr, a log line or an error message."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["redacted"]

_SECRET_OPTIONS = frozenset({"password", "passfile", "sslpassword"})
_HIDDEN = "***"


def redacted(url: str) -> str:
    """``url`` with its password (in the authority or as an option) replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
        netloc = parts.netloc
    except ValueError:
        return "(a malformed URL)"
    options = parse_qsl(parts.query, keep_blank_values=True)
    secret_option = any(name.lower() in _SECRET_OPTIONS for name, _ in options)
    if password is None and not secret_option:
        return url
    if password is not None:
        credentials, _, host = netloc.rpartition("@")
        user = credentials.partition(":")[0]
        netloc = f"{user}:{_HIDDEN}@{host}"
    query = parts.query
    if secret_option:
        query = urlencode(
            [
                (name, _HIDDEN if name.lower() in _SECRET_OPTIONS else value)
                for name, value in options
            ],
            safe="*",
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
