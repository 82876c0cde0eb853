"""MySQL's dialect (`DIALECT`, and `STATEMENTS`: the shared statements in it), the
statements only MySQL runs, as named constants with bound parameters, and the values of
the columns only MySQL has.

Statements whose WHERE clause depends on the request (event filters) are joined from
fixed fragments only, one string per combination, so the set is bounded. No value is
ever formatted into SQL. Lists of values are bound as one JSON parameter and read with
``JSON_TABLE`` (MariaDB 10.6+, MySQL 8).
"""

from __future__ import annotations

from typing import Any, Final

from convostore._text import text_tokens
from convostore._time import to_micros
from convostore.backends import spi
from convostore.backends.mysql.schema import TOKEN_PREFIX, VALUE_PREFIX_LENGTH
from convostore.backends.sql.appends import append_statements
from convostore.backends.sql.decisions import MAX_INTEGER
from convostore.backends.sql.dialect import Dialect
from convostore.backends.sql.embeddings import Embeddings
from convostore.backends.sql.reads import LogReads
from convostore.backends.sql.search import SearchStatements
from convostore.backends.sql.statements import (
    EVENT_FIELDS,
    SESSION_FIELDS,
    USER_FIELDS,
    Statements,
    columns,
)
from convostore.backends.sql.values import (
    MICROS_READER,
    event_values,
    json_list,
    session_values,
    vector_blob,
)
from convostore.backends.sql.writes import KeyStatements, SessionWrites
from convostore.model import Message

# What an insert writes beyond the fields read back: the text filter's and the text
# index's forms of the content.
EVENT_INSERT_FIELDS: Final = (*EVENT_FIELDS, "content_folded", "search_tokens")
SESSION_INSERT_FIELDS: Final = (*SESSION_FIELDS, "is_part")

# The listing indexes of `convostore.backends.sql.statements.LISTING_INDEXES` by their
# names here: ``is_part`` (which never changes) stands in for the partial indexes MySQL
# does not have.
_INDEXES: Final = {
    "sessions_top_by_created": "sessions_by_created",
    "sessions_top_kind_by_created": "sessions_kind_by_created",
    "sessions_by_created": "sessions_all_by_created",
    "sessions_top_by_activity": "sessions_by_activity",
    "sessions_top_kind_by_activity": "sessions_kind_by_activity",
    "sessions_by_activity": "sessions_all_by_activity",
}

# READ COMMITTED takes no gap locks, so a write's locking read of the keys would not
# keep a new key out: the key set is guarded by a row every migrated database has, the
# first migration's record, shared by session writes and taken alone by a key change.
SHARE_INDEXED_KEYS: Final = (
    "SELECT version FROM convostore_schema WHERE version = 1 LOCK IN SHARE MODE"
)
LOCK_INDEXED_KEYS: Final = "SELECT version FROM convostore_schema WHERE version = 1 FOR UPDATE"
DIALECT: Final = Dialect(
    name="mysql",
    param=lambda name, sql_type: f"%({name})s",
    time_param=to_micros,
    rows=MICROS_READER,
    # A listing's cost per page must never rest on the planner's guess.
    index_hint=lambda index: f" FORCE INDEX ({_INDEXES[index]})",
    # The index finds the rows by the value's prefix; the whole value decides.
    value_equals=lambda column, marker: (
        f"{column}_prefix = LEFT({marker}, {VALUE_PREFIX_LENGTH}) AND {column} = {marker}"
    ),
    top_level="is_part = 0",
    # Spelled out: MySQL walks an index range for this, not always for (a, b) < (x, y).
    keyset_before=lambda a, b, x, y: f"({a} < {x} OR ({a} = {x} AND {b} < {y}))",
    returning=False,
    strings=json_list,
    no_limit=MAX_INTEGER,
    database_size=(
        "SELECT coalesce(sum(data_length + index_length), 0) FROM information_schema.tables"
        " WHERE table_schema = DATABASE()"
    ),
    share_indexed_keys=SHARE_INDEXED_KEYS,
    lock_indexed_keys=LOCK_INDEXED_KEYS,
    keep_existing=lambda column: f" ON DUPLICATE KEY UPDATE {column} = {column}",
    replace_existing=lambda key, columns: (
        " ON DUPLICATE KEY UPDATE "
        + ", ".join(f"{column} = VALUES({column})" for column in columns)
    ),
    # utf8mb4 named: the column would take the database's default character set
    # (latin1 where an administrator made the database), refusing four-byte ids.
    strings_table=lambda marker, alias: (
        f"JSON_TABLE({marker}, '$[*]' COLUMNS (value VARCHAR(255) CHARACTER SET utf8mb4"
        f" PATH '$')) AS {alias}"
    ),
    in_strings=lambda column, marker: f"JSON_CONTAINS({marker}, JSON_QUOTE({column}))",
    integers=lambda marker, alias: (
        f"JSON_TABLE({marker}, '$[*]' COLUMNS (value BIGINT PATH '$')) AS {alias}"
    ),
)


class MySQLStatements(Statements):
    """The shared statements, but participants: MySQL keeps no participants table, so
    they are read from the log's ``events_by_author`` index."""

    def __init__(self, dialect: Dialect) -> None:
        super().__init__(dialect)
        # session_id. Everyone who wrote in a session, in order of their first message.
        self.participants = (
            f"SELECT {columns(USER_FIELDS, 'u.')} FROM (SELECT author_id, min(seq) AS first_seq"
            " FROM events WHERE session_id = %(session_id)s AND author_id IS NOT NULL"
            " GROUP BY author_id) p JOIN users u ON u.id = p.author_id ORDER BY p.first_seq"
        )


STATEMENTS: Final = MySQLStatements(DIALECT)


# ---------------------------------------------------------------------------- values

# InnoDB's default innodb_ft_max_token_size: a longer word is not indexed, so it is
# left out here, and a query for it finds nothing (as on PostgreSQL).
MAX_TOKEN_CHARACTERS: Final = 84


def _indexed(word: str) -> str | None:
    token = TOKEN_PREFIX + word
    return token if len(token) <= MAX_TOKEN_CHARACTERS else None


# A message longer than this (in characters) is indexed by its distinct words, each
# once: its words written out in full would make the statement carry the content about
# 1.4 times over again (two prefix characters a word), and the limit of a message is a
# share of the server's max_allowed_packet (README, MySQL "Limits"). Such a message is
# found by every word it holds, and ranked as if each occurred once.
DISTINCT_TOKENS_ABOVE: Final = 1 << 20


def search_tokens(content: str) -> str | None:
    """The words of a message as the FULLTEXT index reads them: `text_tokens`, each
    with `TOKEN_PREFIX`, separated by spaces (each distinct word once, in order of first
    occurrence, for a message over `DISTINCT_TOKENS_ABOVE` characters). None for a
    message with no words."""
    words = text_tokens(content)
    if len(content) > DISTINCT_TOKENS_ABOVE:
        words = list(dict.fromkeys(words))
    tokens = [token for word in words if (token := _indexed(word)) is not None]
    return " ".join(tokens) if tokens else None


def folded_content(content: str) -> str | None:
    """The content as the text filter searches it (``str.lower()``), to be sent; None
    for ASCII content, which the statement folds itself (`FOLD_ON_THE_SERVER`: ASCII's
    case maps the same there), so a message's text is not sent twice."""
    return None if content.isascii() else content.lower()


# The folded content's value in the INSERT: the one sent, or the content (a column
# earlier in the row) folded by the server.
FOLD_ON_THE_SERVER: Final = {"content_folded": "coalesce(%s, LOWER(content))"}


def fulltext_query(terms: tuple[str, ...]) -> str | None:
    """The boolean-mode query that needs every term. Terms are `text_tokens` words
    (letters and digits only), so no query operator can come from what a user typed.
    None when a term is too long to be indexed (nothing can match it)."""
    tokens = [_indexed(term) for term in terms]
    if any(token is None for token in tokens):
        return None
    return " ".join(f"+{token}" for token in tokens if token is not None)


def event_row(prepared: spi.PreparedEvent, seq: int) -> tuple[Any, ...]:
    """An event's parameters in ``EVENT_INSERT_FIELDS`` order: the shared values
    (`convostore.backends.sql.values`), then the folded content the text filter
    searches and the words of the FULLTEXT index."""
    event = prepared.event
    if isinstance(event, Message):
        extra: tuple[Any, ...] = (folded_content(event.content), search_tokens(event.content))
    else:
        extra = (None, None)
    return event_values(prepared, seq) + extra


def new_session_row(new: spi.NewSession) -> tuple[Any, ...]:
    """A new session's parameters in ``SESSION_INSERT_FIELDS`` order."""
    return (*session_values(new), 1 if new.session.part_of is not None else 0)


# ---------------------------------------------------------------------------- sessions

INSERT_SESSION: Final = DIALECT.insert("sessions", SESSION_INSERT_FIELDS)
# The sessions past their expiry, each deleted with a check of its expiry again, so one
# extended in between survives. A part of an expired parent goes with its parent.
EXPIRED_SESSIONS: Final = (
    "SELECT s.id FROM sessions s WHERE s.expires_at < %s AND NOT EXISTS (SELECT 1 FROM "
    "sessions parent WHERE parent.id = s.part_of AND parent.expires_at < %s) ORDER BY s.id"
)
DELETE_IF_EXPIRED: Final = "DELETE FROM sessions WHERE id = %s AND expires_at < %s"
# A key's entry another store backfilled meanwhile is left as it is.
INSERT_METADATA_ENTRY: Final = DIALECT.insert(
    "session_metadata", ("session_id", "name", "value_prefix", "value")
) + DIALECT.keep_existing("value_prefix")
KEY_STATEMENTS: Final = KeyStatements(
    sessions_with_key=(
        "SELECT id, metadata FROM sessions WHERE JSON_CONTAINS_PATH(metadata, 'one', %(path)s)"
    ),
    insert_entry=INSERT_METADATA_ENTRY,
    entry=lambda name, value, session_id: (
        session_id,
        name,
        value[:VALUE_PREFIX_LENGTH],
        value,
    ),
)

# ---------------------------------------------------------------------------- the log

# The append (`convostore.backends.sql.appends`): under the session's row lock, the
# version check and the new ``seq`` values cannot race another append.
APPENDS: Final = append_statements(DIALECT, EVENT_INSERT_FIELDS, event_row, FOLD_ON_THE_SERVER)
# The reads of the log select each row's ``row_id`` first, the key of the store's
# `convostore.backends.sql.event_cache.EventCache`. The text filter is literal and
# case-insensitive as Python's `needle.lower() in content.lower()`: the folded content
# is written by convostore, and LOCATE in a binary collation has no wildcards and
# compares code points.
READS: Final = LogReads(
    DIALECT,
    " AND LOCATE(%(text)s, content_folded) > 0",
    key="row_id",
    turn_start=" AND turn_start = 1",
    fold_text=True,
)


# The session writes (`convostore.backends.sql.writes`).
WRITES: Final = SessionWrites(STATEMENTS, INSERT_SESSION, new_session_row, KEY_STATEMENTS)

# ---------------------------------------------------------------------------- search

# A character str.strip() keeps: a message with none is blank (all of Python's
# whitespace lies below U+3001).
_NON_BLANK: Final = "[^" + "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "]"
EMBEDDINGS: Final = Embeddings(
    DIALECT,
    "content REGEXP %(non_blank)s",
    non_blank_parameters={"non_blank": _NON_BLANK},
    vector=vector_blob,
)
# Text search runs on the FULLTEXT index of ``search_tokens``, in boolean mode with
# every term required (`fulltext_query`), ranked by InnoDB's relevance.
SEARCH: Final = SearchStatements(
    DIALECT,
    "row_id",
    text_matches=(
        "SELECT e.row_id, MATCH (e.search_tokens) AGAINST (%(query)s IN BOOLEAN MODE) AS score"
        " FROM events e JOIN sessions s ON s.id = e.session_id"
        " WHERE MATCH (e.search_tokens) AGAINST (%(query)s IN BOOLEAN MODE)"
        " AND e.type = 'MESSAGE'"
    ),
    text_order=" ORDER BY score DESC, e.id LIMIT %(k)s",
)
