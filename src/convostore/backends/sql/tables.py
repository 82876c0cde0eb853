"""The tables every SQL backend has, described once, and rendered in each dialect's DDL.

A `Table` lists its `Column`s (a logical `Type`, nullability, a default, the table it
references), its key and its `Index`es. A column, index or table that only some backends
have names them (``only``), so one list keeps each backend's column order. A `DDL` says
how a dialect writes them: its type names, its table options, and whether keys and
foreign keys go inside CREATE TABLE (MySQL) or are statements of their own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["DDL", "MYSQL", "POSTGRESQL", "SQLITE", "TABLES", "Column", "Index", "Table", "Type"]

MYSQL: Final = "mysql"
POSTGRESQL: Final = "postgresql"
SQLITE: Final = "sqlite"
EVERY: Final = frozenset({MYSQL, POSTGRESQL, SQLITE})
# The dialects with partial indexes; MySQL indexes a stored flag in front instead.
PARTIAL: Final = frozenset({POSTGRESQL, SQLITE})


# The logical types: ID an identifier, compared by code point; LABEL a short text of at
# most ``size`` characters (a kind, a role); ONE the id of a table of one row (1, where
# the dialect checks it).
Type = enum.Enum("Type", "ID LABEL TEXT JSON TIME BIGINT INT FLAG VECTOR ONE")


@dataclass(frozen=True, slots=True)
class Column:
    """``type`` a `Type`, or one dialect's own type written as is; ``references``: the
    table whose ``id`` it holds, deleted with it; ``check``: declared where `DDL.checks`."""

    name: str
    type: Type | str
    null: bool = False
    size: int = 0
    default: int | None = None
    references: str = ""
    check: str = ""
    only: frozenset[str] = EVERY


@dataclass(frozen=True, slots=True)
class Index:
    """``where``: a partial index's condition; ``method``: ``fulltext`` (MySQL) or an
    index method (PostgreSQL's ``USING``), with ``options`` after it."""

    name: str
    columns: str
    unique: bool = False
    where: str = ""
    method: str = ""
    options: str = ""
    only: frozenset[str] = EVERY


@dataclass(frozen=True, slots=True)
class Table:
    """``key_in``: the dialects that declare ``key`` as the primary key (SQLite keeps the
    rowid of ``events`` and indexes its key instead); ``clustered``: stored in key order
    (SQLite's WITHOUT ROWID)."""

    name: str
    columns: tuple[Column, ...]
    key: str
    indexes: tuple[Index, ...] = ()
    key_in: frozenset[str] = EVERY
    clustered: bool = False
    only: frozenset[str] = EVERY


@dataclass(frozen=True, slots=True)
class DDL:
    """How one dialect writes a table: ``types`` by `Type` (``{size}`` is the column's
    size, 255 where it has none; ``{name}`` its name); ``options`` after each CREATE
    TABLE; ``inline``: indexes and foreign keys inside CREATE TABLE."""

    dialect: str
    types: Mapping[Type, str]
    options: str = ""
    if_not_exists: bool = False
    inline: bool = False
    checks: bool = False
    without_rowid: bool = False

    def create(self, tables: Iterable[Table]) -> tuple[str, ...]:
        """The statements that create ``tables`` (the dialect's own), in order."""
        statements: list[str] = []
        for table in tables:
            if self.dialect in table.only:
                statements += self._create(table)
        return tuple(statements)

    def _create(self, table: Table) -> list[str]:
        columns = [c for c in table.columns if self.dialect in c.only]
        indexes = [i for i in table.indexes if self.dialect in i.only]
        key = table.key if self.dialect in table.key_in else ""
        lines = [self._column(c, key == c.name) for c in columns]
        lines += [f"PRIMARY KEY ({key})"] if "," in key else []
        if self.inline:
            lines += [self._key(index) for index in indexes]
            lines += [
                f"CONSTRAINT {table.name}_{c.name.removesuffix('_id')} FOREIGN KEY ({c.name})"
                f" REFERENCES {c.references} (id) ON DELETE CASCADE"
                for c in columns
                if c.references
            ]
        create = "CREATE TABLE IF NOT EXISTS" if self.if_not_exists else "CREATE TABLE"
        rowid = " WITHOUT ROWID" if table.clustered and self.without_rowid else ""
        body = ",\n    ".join(lines)
        statement = f"{create} {table.name} (\n    {body}\n){rowid}{self.options}"
        return [statement] + ([] if self.inline else [_index(table.name, i) for i in indexes])

    def _column(self, column: Column, key: bool) -> str:
        type_ = column.type
        if isinstance(type_, Type):
            type_ = self.types[type_].format(size=column.size or 255, name=column.name)
        parts = [column.name, type_]
        if key:
            parts.append("PRIMARY KEY")
        elif not column.null:
            parts.append("NOT NULL")
        if column.default is not None:
            parts.append(f"DEFAULT {column.default}")
        if column.references and not self.inline:
            parts.append(f"REFERENCES {column.references} (id) ON DELETE CASCADE")
        if column.check and self.checks:
            parts.append(f"CHECK ({column.check})")
        return " ".join(parts)

    @staticmethod
    def _key(index: Index) -> str:
        kind = "UNIQUE " if index.unique else f"{index.method.upper()} " if index.method else ""
        return f"{kind}KEY {index.name} ({index.columns})"


def _index(table: str, index: Index) -> str:
    unique = "UNIQUE " if index.unique else ""
    using = f"USING {index.method} " if index.method else ""
    options = f" {index.options}" if index.options else ""
    where = f" WHERE {index.where}" if index.where else ""
    return f"CREATE {unique}INDEX {index.name} ON {table} {using}({index.columns}){options}{where}"


ID, LABEL, TEXT, JSON, TIME, BIGINT, INT, FLAG = (
    Type.ID, Type.LABEL, Type.TEXT, Type.JSON, Type.TIME, Type.BIGINT, Type.INT, Type.FLAG,
)  # fmt: skip
ONLY_MYSQL: Final = frozenset({MYSQL})
ONLY_PG: Final = frozenset({POSTGRESQL})
ONLY_SQLITE: Final = frozenset({SQLITE})
_TOP: Final = "part_of IS NULL"
_TURN_START: Final = "type = 'MESSAGE' AND role = 'user' AND branch IS NULL AND "

# fmt: off
USERS: Final = Table("users", (
    Column("id", ID), Column("display_name", TEXT), Column("username", TEXT, null=True),
    Column("email", TEXT, null=True), Column("kind", LABEL, size=16), Column("metadata", JSON),
), key="id")

SESSIONS: Final = Table("sessions", (
    Column("id", ID), Column("owner_id", ID, null=True), Column("title", TEXT, null=True),
    Column("kind", LABEL, size=255), Column("part_of", ID, null=True, references="sessions"),
    Column("held_with", ID, null=True), Column("created_at", TIME),
    Column("last_activity_at", TIME), Column("expires_at", TIME, null=True),
    Column("metadata", JSON), Column("version", BIGINT, default=0),
    Column("last_seq", BIGINT, default=0), Column("stamp", LABEL, size=64),
    Column("message_count", BIGINT, default=0), Column("started_by", ID, null=True),
    # Whether part_of is set (it never changes): MySQL's stand-in for partial indexes.
    Column("is_part", FLAG, only=ONLY_MYSQL),
), key="id", indexes=(
    # Listings page by keyset on these, so page n reads what page 1 reads. Top-level
    # listings (the default) have their own partial indexes; a listing that includes
    # parts and filters by kind walks the owner's index and filters kind per row.
    Index("sessions_top_by_created", "owner_id, id", where=_TOP, only=PARTIAL),
    Index("sessions_top_by_activity", "owner_id, last_activity_at, id", where=_TOP, only=PARTIAL),
    Index("sessions_top_kind_by_created", "owner_id, kind, id", where=_TOP, only=PARTIAL),
    Index("sessions_top_kind_by_activity", "owner_id, kind, last_activity_at, id",
        where=_TOP, only=PARTIAL),
    Index("sessions_by_created", "owner_id, id", only=PARTIAL),
    Index("sessions_by_activity", "owner_id, last_activity_at, id", only=PARTIAL),
    Index("sessions_by_created", "owner_id, is_part, id", only=ONLY_MYSQL),
    Index("sessions_by_activity", "owner_id, is_part, last_activity_at, id", only=ONLY_MYSQL),
    Index("sessions_kind_by_created", "owner_id, is_part, kind, id", only=ONLY_MYSQL),
    Index("sessions_kind_by_activity", "owner_id, is_part, kind, last_activity_at, id",
        only=ONLY_MYSQL),
    Index("sessions_all_by_created", "owner_id, id", only=ONLY_MYSQL),
    Index("sessions_all_by_activity", "owner_id, last_activity_at, id", only=ONLY_MYSQL),
    # Also serves the cascade from a session to its parts.
    Index("sessions_parts", "part_of, held_with, id"),
    Index("sessions_expiry", "expires_at", where="expires_at IS NOT NULL", only=PARTIAL),
    Index("sessions_expiry", "expires_at", only=ONLY_MYSQL),
))

# MySQL clusters it by (session, seq), so a log reads as one range of the primary key,
# and numbers its rows (``row_id``) for search hits and the vector cache; SQLite keeps
# its rowid for the same and indexes the key.
EVENTS: Final = Table("events", (
    Column("session_id", ID, references="sessions"), Column("seq", BIGINT),
    Column("row_id", "BIGINT AUTO_INCREMENT", only=ONLY_MYSQL),
    Column("id", ID), Column("type", LABEL, size=64), Column("created_at", TIME),
    Column("branch", TEXT, null=True), Column("metadata", JSON),
    Column("payload", JSON, null=True), Column("synthetic", FLAG),
    Column("role", LABEL, null=True, size=16), Column("content", TEXT, null=True),
    Column("content_folded", TEXT, null=True, only=ONLY_MYSQL),
    Column("search_tokens", TEXT, null=True, only=ONLY_MYSQL),
    Column("author_id", ID, null=True), Column("recipient_ids", JSON, null=True),
    Column("in_reply_to", TEXT, null=True), Column("tool_calls", JSON, null=True),
    Column("tool_call_id", TEXT, null=True), Column("attachments", JSON, null=True),
    Column("data", JSON, null=True), Column("assets", JSON, null=True),
    Column("narration", TEXT, null=True), Column("embedding", Type.VECTOR, null=True),
    Column("embedding_model", LABEL, null=True, size=255),
    Column("stamp", LABEL, null=True, size=64),
    Column("turn_start", f"TINYINT AS ({_TURN_START}synthetic = 0) STORED", null=True,
        only=ONLY_MYSQL),
    Column("search_terms", "tsvector", null=True, only=ONLY_PG),
    Column("search_length", INT, null=True, only=ONLY_PG),
), key="session_id, seq", key_in=frozenset({MYSQL, POSTGRESQL}), indexes=(
    Index("events_by_seq", "session_id, seq", unique=True, only=ONLY_SQLITE),
    Index("events_by_id", "id", unique=True),
    Index("events_by_row", "row_id", unique=True, only=ONLY_MYSQL),
    Index("events_by_type", "session_id, type, seq", only=ONLY_MYSQL),
    # A read of the last n events extends back to a turn start, and the active view
    # starts at the newest compaction: each is found by a descending probe here.
    Index("events_turn_starts", "session_id, seq",
        where=_TURN_START + "NOT synthetic", only=ONLY_PG),
    Index("events_turn_starts", "session_id, seq",
        where=_TURN_START + "synthetic = 0", only=ONLY_SQLITE),
    Index("events_turn_starts", "session_id, turn_start, seq", only=ONLY_MYSQL),
    Index("events_compactions", "session_id, seq", where="type = 'COMPACTION'", only=PARTIAL),
    Index("events_by_author", "session_id, author_id, seq", only=ONLY_MYSQL),
    Index("events_by_model", "embedding_model, row_id", only=ONLY_MYSQL),
    # Without fastupdate's pending list, which every search would read whole until a
    # vacuum merges it: each insert pays for its words, each search walks the index.
    Index("events_search", "search_terms",
        method="gin", options="WITH (fastupdate = off)", only=ONLY_PG),
    Index("events_search", "search_tokens", method="fulltext", only=ONLY_MYSQL),
))

PARTICIPANTS: Final = Table("participants", (
    Column("session_id", ID, references="sessions"), Column("user_id", ID),
    Column("first_seq", BIGINT),
), key="session_id, user_id", clustered=True, only=PARTIAL, indexes=(
    Index("participants_in_order", "session_id, first_seq"),
))

INDEXED_METADATA_KEYS: Final = Table(
    "indexed_metadata_keys", (Column("name", ID, size=64),), key="name", clustered=True
)

SESSION_METADATA: Final = Table("session_metadata", (
    Column("name", ID), Column("value", ID), Column("session_id", ID, references="sessions"),
), key="name, value, session_id", clustered=True, only=PARTIAL, indexes=(
    Index("session_metadata_by_session", "session_id"),
))
# The JDBC seed's metadata index: (name, the value's first 512 characters) keeps the key
# under InnoDB's 3072-byte limit; the whole value is compared on the rows it finds.
MYSQL_SESSION_METADATA: Final = Table("session_metadata", (
    Column("session_id", ID, references="sessions"), Column("name", ID, size=64),
    Column("value_prefix", LABEL, size=512), Column("value", TEXT),
), key="session_id, name", only=ONLY_MYSQL, indexes=(
    Index("session_metadata_lookup", "name, value_prefix"),
))

# The vector index declared from the store's embedder: one row.
VECTOR_INDEX: Final = Table("vector_index", (
    Column("id", Type.ONE),
    Column("dimensions", INT, check="dimensions > 0"),
    Column("metric", LABEL, size=16, check="metric IN ('cosine', 'euclidean')"),
    Column("model", LABEL, size=255),
), key="id")
# fmt: on

TABLES: Final = (
    USERS, SESSIONS, EVENTS, PARTICIPANTS, INDEXED_METADATA_KEYS, SESSION_METADATA,
    MYSQL_SESSION_METADATA, VECTOR_INDEX,
)  # fmt: skip
"""Every SQL backend's tables, in the order its first migration creates them."""
