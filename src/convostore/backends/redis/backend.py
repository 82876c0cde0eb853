"""`RedisBackend`: convostore on Redis or Valkey, one server or a cluster.

Every owner's sessions, logs, listings, metadata index entries, text index and vectors
live in one owner bucket (one hash tag, so one slot), chosen from the owner's id among
the database's buckets (their number fixed when the database is first created). Each
write primitive is one server-side function in its bucket (`functions`), so it applies
whole, checked before its first write. A session id's bucket is found through its
directory entry, written once when the session is created; users live in the bucket of
their own id. What spans owners (metadata lookups, unscoped search, stats, expiry) asks
every bucket, one pipeline per master, and merges.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final, Self

from convostore._json import index_value
from convostore._vectors import from_blobs, top_k
from convostore.backends import decisions, interface, spi
from convostore.backends.migrations import refuse_newer
from convostore.backends.redis import codec
from convostore.backends.redis.functions import function
from convostore.backends.redis.nodes import Nodes
from convostore.backends.redis.url import RedisTarget, parse_redis_url
from convostore.backends.sql.values import vector_blob
from convostore.backends.sql.vector_cache import (
    Changes,
    Feed,
    Position,
    SessionRow,
    VectorCache,
    VectorRow,
)
from convostore.backends.urls import target_of
from convostore.errors import EventIdConflictError, StoreError
from convostore.filters import (
    EventFilter,
    apply_filter,
    compaction_parts,
    compose_view,
    is_turn_start,
)

__all__ = ["RedisBackend"]

SCHEMA_VERSION: Final = 2
# Schema 2 keeps every vector also in its bucket's vector set (Redis 8) or change feed
# (Valkey). A database written at schema 1 holds its earlier vectors in neither, so it is
# searched by the exact scan (every answer still exact, only slower); it says so in
# ``vector_search_path``. A new database starts at 2.
_VECTORS_INDEXED_FROM: Final = 2
# How many events a read asks for at a time when it cannot know how many it needs.
_READ_CHUNK: Final = 256
# Session ids whose bucket this process remembers (entries are written once).
_DIRECTORY_CACHE: Final = 100_000
# A bucket's vector set of at most this many vectors is scanned instead (as cheap).
_SCANNED_UP_TO: Final = 256

_Scanned = tuple[int, bytes, bytes, bytes]
"""A vector found: its bucket, session id, seq and stored float32 vector."""
_Shortlisted = tuple[int, bytes, bytes, float]
"""A vector a vector set gave: its bucket, session id, seq and its similarity there."""


def _candidates(k: int) -> int:
    """How many a vector set gives for a top ``k``, ranked again by the stored vectors:
    enough that its quantised order does not change the exact top ``k``."""
    return max(2 * k, k + 32)


class RedisBackend(interface.Backend):
    """One namespace of a Redis or Valkey server or cluster (see the module)."""

    capabilities = interface.Capabilities(persistent=True, full_text_index=True, cross_process=True)

    def __init__(self, target: RedisTarget) -> None:
        self.target = target
        self.nodes = Nodes(target)
        self.buckets = target.buckets
        self.schema = SCHEMA_VERSION
        base = f"cs:{target.namespace}:"
        self._base = base
        self._meta = f"{base}meta".encode()
        self._keys_key = f"{base}keys".encode()
        self._prefixes: list[bytes] = []
        self._directory: dict[str, int] = {}
        self._known_users: set[str] = set()
        # Message id -> bucket, as pending_embeddings found them (for set_embeddings).
        self._message_buckets: dict[str, int] = {}
        # Without vector sets: each bucket's vectors, as its change feed says.
        self._caches: dict[int, VectorCache] = {}
        self._cache_turn: asyncio.Lock | None = None
        # How a vector search over more than one session ranks: "vector sets" (Redis
        # 8), "vector cache" (no vector sets) or "scan" (the URL's ``vectors=scan``).
        self.vector_search_path = "vector sets"

    # ---------------------------------------------------------------- lifecycle

    @classmethod
    async def open(cls, url: str, **options: Any) -> Self:
        """Connect to the namespace ``url`` names (see `parse_redis_url`), load the
        functions and record the database's bucket count on first use."""
        backend = cls(target_of(parse_redis_url, url, options, "Redis"))
        async with interface.closed_on_failure(backend):
            await backend.nodes.connect()
            if not await backend._read_meta():
                await backend.nodes.call(
                    backend._meta,
                    [
                        ("HSETNX", backend._meta, "buckets", backend.target.buckets),
                        ("HSETNX", backend._meta, "schema", SCHEMA_VERSION),
                    ],
                    write=True,
                )
                await backend._read_meta()
            if backend.target.vectors == "scan" or backend.schema < _VECTORS_INDEXED_FROM:
                backend.vector_search_path = "scan"
            elif not backend.nodes.vector_sets:
                backend.vector_search_path = "vector cache"
            backend.capabilities = dataclasses.replace(
                backend.capabilities,
                native_vector_index=backend.vector_search_path == "vector sets",
            )
        return backend

    @classmethod
    async def pending_migrations(cls, url: str, **options: Any) -> list[str]:
        backend = cls(target_of(parse_redis_url, url, options, "Redis"))
        async with interface.closing(backend):
            await backend.nodes.connect()
            [schema] = await backend.nodes.call(
                backend._meta, [("HGET", backend._meta, "schema")], write=False
            )
            if schema is None:
                return [f"{SCHEMA_VERSION}: create namespace {backend.target.namespace}"]
            refuse_newer(int(schema), SCHEMA_VERSION, backend.target.where)
            return []

    async def _read_meta(self) -> bool:
        """Read the database's bucket count and schema; False when it has none yet."""
        [(buckets, schema)] = await self.nodes.call(
            self._meta, [("HMGET", self._meta, "buckets", "schema")], write=False
        )
        if buckets is None or schema is None:
            return False
        refuse_newer(int(schema), SCHEMA_VERSION, self.target.where)
        self.schema = int(schema)
        self.buckets = int(buckets)
        self._prefixes = [f"{self._base}{{{b}}}:".encode() for b in range(self.buckets)]
        return True

    async def close(self) -> None:
        self._caches.clear()
        await self.nodes.close()

    # ---------------------------------------------------------------- keys and calls

    def _bucket(self, owner_id: str | None) -> int:
        return zlib.crc32((owner_id or "").encode()) % self.buckets

    def _prefix(self, bucket: int) -> bytes:
        return self._prefixes[bucket]

    def _directory_key(self, session_id: str) -> bytes:
        return f"{self._base}d:{{{session_id}}}".encode()

    def _fence(self, bucket: int) -> bytes:
        return self._prefix(bucket) + b"fence"

    def _command(self, bucket: int, name: str, *args: Any) -> tuple[Any, ...]:
        return ("FCALL", function(name), 1, self._fence(bucket), *args)

    async def _fcall(self, bucket: int, name: str, *args: Any, write: bool) -> Any:
        key = self._fence(bucket)
        [reply] = await self.nodes.call(
            key, [("FCALL", function(name), 1, key, *args)], write=write
        )
        return reply

    async def _everywhere(self, name: str, *args: Any, write: bool) -> list[Any]:
        fences = [prefix + b"fence" for prefix in self._prefixes]
        calls = [(key, ("FCALL", function(name), 1, key, *args)) for key in fences]
        return await self.nodes.fan_out(calls, write=write)

    async def _locate(self, session_id: str, *, fresh: bool = False) -> int | None:
        """The bucket the session's directory entry names, or None (``fresh``: read
        again, not as this process remembers it)."""
        bucket = None if fresh else self._directory.get(session_id)
        if bucket is not None:
            return bucket
        key = self._directory_key(session_id)
        [found] = await self.nodes.call(key, [("GET", key)], write=False)
        if found is None:
            return None
        bucket = int(found)
        if len(self._directory) >= _DIRECTORY_CACHE:
            self._directory.clear()
        self._directory[session_id] = bucket
        return bucket

    async def _claim(self, session_id: str, bucket: int) -> int | None:
        """Write the session's directory entry (once); the other bucket it already
        names, if any."""
        key = self._directory_key(session_id)
        [found] = await self.nodes.call(
            key, [("FCALL", function("claim"), 1, key, bucket)], write=True
        )
        if found == b"ok":
            self._directory[session_id] = bucket
            return None
        return int(found)

    async def _reclaim(self, session_id: str, old: int, new: int) -> bool:
        key = self._directory_key(session_id)
        [moved] = await self.nodes.call(
            key, [("FCALL", function("reclaim"), 1, key, old, new)], write=True
        )
        if moved:
            self._directory[session_id] = new
        return bool(moved)

    # ---------------------------------------------------------------- users

    def _user_key(self, user_id: str) -> bytes:
        return self._prefix(self._bucket(user_id)) + b"users"

    async def put_user(self, user: spi.User) -> None:
        bucket = self._bucket(user.id)
        await self._fcall(
            bucket, "put_users", "replace", user.id, codec.user_document(user), write=True
        )
        self._known_users.add(user.id)

    async def get_user(self, user_id: str) -> spi.User | None:
        key = self._user_key(user_id)
        [document] = await self.nodes.call(key, [("HGET", key, user_id)], write=False)
        return codec.read_user(document)

    async def _users(self, user_ids: Iterable[str]) -> dict[str, spi.User]:
        ids = list(dict.fromkeys(user_ids))
        if not ids:
            return {}
        replies = await self.nodes.fan_out(
            [(self._user_key(i), ("HGET", self._user_key(i), i)) for i in ids], write=False
        )
        return {
            i: user
            for i, reply in zip(ids, replies, strict=True)
            if (user := codec.read_user(reply))
        }

    async def _missing_users(self, users: Sequence[spi.User], required: Sequence[str]) -> list[str]:
        given = {user.id for user in users}
        wanted = [i for i in required if i not in given and i not in self._known_users]
        if not wanted:
            return []
        replies = await self.nodes.fan_out(
            [(self._user_key(i), ("HEXISTS", self._user_key(i), i)) for i in wanted],
            write=False,
        )
        missing = []
        for user_id, exists in zip(wanted, replies, strict=True):
            if exists:
                self._known_users.add(user_id)
            else:
                missing.append(user_id)
        return missing

    async def _insert_users(self, users: Sequence[spi.User]) -> None:
        by_bucket: dict[int, list[Any]] = {}
        for user in users:
            if user.id not in self._known_users:
                by_bucket.setdefault(self._bucket(user.id), []).extend(
                    (user.id, codec.user_document(user))
                )
        if not by_bucket:
            return
        calls = [
            (
                self._prefix(b) + b"fence",
                ("FCALL", function("put_users"), 1, self._prefix(b) + b"fence", "absent", *args),
            )
            for b, args in by_bucket.items()
        ]
        await self.nodes.fan_out(calls, write=True)
        self._known_users.update(user.id for user in users)

    # ---------------------------------------------------------------- sessions

    async def stats(self) -> interface.DatabaseStats:
        """Counts summed over the buckets (each bucket's counts are one snapshot; the
        sum is not)."""
        totals = [0, 0, 0, 0, 0]
        for reply in await self._everywhere("stats", write=False):
            for index, value in enumerate(reply):
                totals[index] += int(value)
        users, sessions, events, messages, vectors = totals
        return interface.DatabaseStats(users, sessions, events, messages, vectors, None)

    async def insert_session(self, new: spi.NewSession, *, if_absent: bool) -> spi.Session | None:
        session = new.session
        bucket = self._bucket(session.owner_id)
        header: dict[str, Any] = {
            "s": codec.session_document(new),
            "mode": "insert",
            "missing": await self._missing_users(new.users_to_insert, new.required_user_ids),
        }
        other = await self._claim(session.id, bucket)
        if other is not None:
            if await self._fcall(other, "get_session", session.id, write=False) is not None:
                decisions.refuse_existing(session, if_absent)
                return None
            await self._reclaim(session.id, other, bucket)
        if session.part_of is not None:
            parent_bucket = await self._locate(session.part_of)
            if parent_bucket != bucket:
                parent = (
                    None
                    if parent_bucket is None
                    else await self._fcall(
                        parent_bucket, "get_session", session.part_of, write=False
                    )
                )
                header["parent"] = (
                    "missing" if parent is None else "is_part" if parent[4] is not None else "owner"
                )
        reply = await self._fcall(bucket, "insert_session", _dumps(header), write=True)
        outcome = reply[0]
        if outcome == b"exists":
            decisions.refuse_existing(session, if_absent)
            return None
        _raise_refusal(reply, session)
        await self._insert_users(new.users_to_insert)
        return codec.read_session(reply[1])

    async def find_or_insert_part(self, new: spi.NewSession) -> spi.Session:
        part_of = new.session.part_of
        assert part_of is not None
        bucket = await self._locate(part_of)
        if bucket is None:
            raise _no_holder(new)
        header = {
            "s": codec.session_document(new),
            "mode": "part",
            "missing": await self._missing_users(new.users_to_insert, new.required_user_ids),
        }
        await self._claim(new.session.id, bucket)
        reply = await self._fcall(bucket, "insert_session", _dumps(header), write=True)
        if reply[0] == b"found":
            return codec.read_session(reply[1])
        if reply[0] == b"parent_missing":
            raise _no_holder(new)
        if reply[0] == b"exists":
            decisions.refuse_existing(new.session, False)
        _raise_refusal(reply, new.session)
        await self._insert_users(new.users_to_insert)
        return codec.read_session(reply[1])

    async def get_session(self, session_id: str) -> spi.Session | None:
        remembered = session_id in self._directory
        bucket = await self._locate(session_id)
        if bucket is None:
            return None
        values = await self._fcall(bucket, "get_session", session_id, write=False)
        if values is None and remembered:
            # Deleted, and perhaps created again in another owner's bucket since.
            moved = await self._locate(session_id, fresh=True)
            if moved is not None and moved != bucket:
                values = await self._fcall(moved, "get_session", session_id, write=False)
        return None if values is None else codec.read_session(values)

    async def update_session(self, changes: spi.SessionChanges) -> spi.Session:
        bucket = await self._locate(changes.session_id)
        if bucket is None:
            raise decisions.missing_session(changes.session_id)
        header = {
            "id": changes.session_id,
            "expected": changes.expected_stamp,
            "title": changes.title,
            "meta": changes.metadata_json,
            "cand": codec._encode([list(pair) for pair in changes.indexed_metadata]),
            "expires": None if changes.expires_at is None else codec.micros(changes.expires_at),
            "stamp": changes.new_stamp,
        }
        reply = await self._fcall(bucket, "update_session", _dumps(header), write=True)
        if reply[0] == b"missing":
            raise decisions.missing_session(changes.session_id)
        if reply[0] == b"stale":
            raise decisions.stale_or_missing(changes.session_id, True)
        return codec.read_session(reply[1])

    async def set_title(self, session_id: str, title: str | None, stamp: str) -> spi.Session:
        bucket = await self._locate(session_id)
        if bucket is None:
            raise decisions.missing_session(session_id)
        reply = await self._fcall(
            bucket, "set_title", session_id, "0" if title is None else "1", title or "", stamp,
            write=True,
        )  # fmt: skip
        if reply[0] == b"missing":
            raise decisions.missing_session(session_id)
        return codec.read_session(reply[1])

    async def delete_session(self, session_id: str) -> bool:
        bucket = await self._locate(session_id)
        if bucket is None:
            return False
        return bool(await self._fcall(bucket, "delete_session", session_id, write=True))

    async def _listing(self, page: interface.SessionPage) -> list[Any]:
        """The session rows of one page (see `Backend.list_sessions`)."""
        after = page.after
        after_at = ""
        if after is not None and after.last_activity_us is not None:
            after_at = str(after.last_activity_us)
        rows: list[Any] = await self._fcall(
            self._bucket(page.owner_id),
            "list_sessions",
            "=" + page.owner_id,
            "c" if page.order is spi.SessionOrder.CREATED else "a",
            "1" if page.filter.include_parts else "0",
            page.filter.kind or "",
            "" if after is None else after.session_id,
            after_at,
            page.limit,
            write=False,
        )
        return rows

    async def list_sessions(self, page: interface.SessionPage) -> list[spi.Session]:
        return [codec.read_session(values) for values in await self._listing(page)]

    async def list_summaries(self, page: interface.SessionPage) -> list[spi.SessionSummary]:
        return await self._summaries(await self._listing(page))

    async def _summaries(self, rows: Sequence[Sequence[Any]]) -> list[spi.SessionSummary]:
        ids = [codec.text(value) for row in rows for value in (row[1], row[13])]
        users = await self._users(i for i in ids if i is not None)
        summaries = []
        for row in rows:
            owner, starter = codec.text(row[1]), codec.text(row[13])
            summaries.append(
                spi.SessionSummary(
                    session=codec.read_session(row),
                    owner=None if owner is None else users.get(owner),
                    message_count=int(row[12] or 0),
                    started_by=None if starter is None else users.get(starter),
                )
            )
        return summaries

    async def count_sessions(self, owner_id: str, filter: spi.SessionFilter) -> int:
        return int(
            await self._fcall(
                self._bucket(owner_id),
                "count_sessions",
                "=" + owner_id,
                "1" if filter.include_parts else "0",
                filter.kind or "",
                write=False,
            )
        )

    async def find_part(self, part_of: str, held_with: str) -> spi.Session | None:
        bucket = await self._locate(part_of)
        if bucket is None:
            return None
        values = await self._fcall(bucket, "find_part", part_of, held_with, write=False)
        return None if values is None else codec.read_session(values)

    async def list_parts(self, part_of: str) -> list[spi.SessionSummary]:
        bucket = await self._locate(part_of)
        if bucket is None:
            return []
        return await self._summaries(await self._fcall(bucket, "list_parts", part_of, write=False))

    async def participants(self, session_id: str) -> list[spi.User]:
        bucket = await self._locate(session_id)
        if bucket is None:
            return []
        ids = [
            i.decode() for i in await self._fcall(bucket, "participants", session_id, write=False)
        ]
        users = await self._users(ids)
        return [users[i] for i in ids if i in users]

    async def find_sessions_by_metadata(self, name: str, value: str) -> list[spi.Session]:
        sessions = [
            codec.read_session(values)
            for rows in await self._everywhere("by_metadata", name, value, write=False)
            for values in rows
        ]
        found = [
            s for s in sessions if name in s.metadata and index_value(s.metadata[name]) == value
        ]
        return sorted(found, key=lambda s: s.id)

    async def delete_expired(self, before: datetime) -> int:
        replies = await self._everywhere("delete_expired", codec.micros(before), write=True)
        return sum(int(reply) for reply in replies)

    # ---------------------------------------------------------------- indexed metadata

    async def add_indexed_keys(self, keys: frozenset[str]) -> frozenset[str]:
        if keys:
            await self._everywhere("add_keys", *sorted(keys), write=True)
            await self.nodes.call(
                self._keys_key, [("SADD", self._keys_key, *sorted(keys))], write=True
            )
        return await self.indexed_keys()

    async def indexed_keys(self) -> frozenset[str]:
        [members] = await self.nodes.call(
            self._keys_key, [("SMEMBERS", self._keys_key)], write=False
        )
        return frozenset(member.decode() for member in members)

    async def remove_indexed_key(self, key: str) -> bool:
        replies = await self._everywhere("remove_key", key, write=True)
        [removed] = await self.nodes.call(
            self._keys_key, [("SREM", self._keys_key, key)], write=True
        )
        return bool(removed) or any(int(reply) for reply in replies)

    # ---------------------------------------------------------------- the log

    async def append(self, append: spi.PreparedAppend) -> spi.AppendOutcome:
        session_id = append.session_id
        bucket = await self._locate(session_id)
        if bucket is None:
            raise decisions.missing_session(session_id)
        header = {
            "ev": str(-1 if append.expected_version is None else append.expected_version),
            "missing": await self._missing_users(append.users_to_insert, append.required_user_ids),
            "stamp": append.new_stamp,
            "act": "" if append.activity_at is None else codec.micros(append.activity_at),
            "mc": str(append.new_message_count),
            "sb": append.started_by or "",
        }
        arguments: list[Any] = [session_id, _dumps(header)]
        for prepared in append.events:
            arguments.extend(codec.event_arguments(prepared))
        reply = await self._fcall(bucket, "append", *arguments, write=True)
        outcome = reply[0]
        if outcome == b"missing":
            self._directory.pop(session_id, None)
            raise decisions.missing_session(session_id)
        if outcome == b"users":
            raise decisions.unknown_users(json.loads(reply[1]))
        if outcome == b"stale":
            return spi.AppendOutcome(applied=False)
        if outcome == b"replay":
            return spi.AppendOutcome(applied=False, events=[codec.read_event(session_id, reply[1])])
        if outcome == b"conflict":
            where = "" if reply[2] == b"1" else " by another session"
            raise EventIdConflictError(f"event id {reply[1].decode()!r} is already used{where}")
        base = int(reply[1])
        await self._insert_users(append.users_to_insert)
        return spi.AppendOutcome(
            applied=True,
            events=[_with_seq(p.event, base + i) for i, p in enumerate(append.events, start=1)],
        )

    async def version(self, session_id: str) -> int:
        bucket = await self._locate(session_id)
        if bucket is None:
            return 0
        return int(await self._fcall(bucket, "version", session_id, write=False))

    async def _range(
        self, bucket: int, session_id: str, first: int, last: int
    ) -> tuple[int, int, list[spi.Event]]:
        """(the log's last seq, its newest boundary's seq, events first..last); -1 for
        the last seq: no session."""
        reply = await self._fcall(bucket, "read_range", session_id, first, last, write=False)
        version, boundary = int(reply[0]), int(reply[1])
        return version, boundary, [codec.read_event(session_id, stored) for stored in reply[2:]]

    async def read(self, session_id: str, event_filter: EventFilter) -> list[spi.Event]:
        f = event_filter
        if f.last == 0 or f.limit == 0:
            return []
        bucket = await self._locate(session_id)
        if bucket is None:
            return []
        if f.active_view:
            version, boundary, _ = await self._range(bucket, session_id, 1, 0)
            if version < 0:
                return []
            if boundary:
                return await self._active_view(bucket, session_id, boundary, version, f)
        if f.last is None:
            return await self._read_forward(bucket, session_id, f)
        return await self._read_last(bucket, session_id, f)

    async def _read_forward(self, bucket: int, session_id: str, f: EventFilter) -> list[spi.Event]:
        plain = f == EventFilter(after_seq=f.after_seq, limit=f.limit)
        first = (f.after_seq or 0) + 1
        size = f.limit if plain and f.limit is not None else max(f.limit or 0, _READ_CHUNK)
        size = min(size, 10_000)
        found: list[spi.Event] = []
        upto: int | None = None
        while True:
            last = first + size - 1 if upto is None else min(first + size - 1, upto)
            version, _, events = await self._range(bucket, session_id, first, last)
            if version < 0:
                return []
            upto = version if upto is None else upto
            found.extend(e for e in events if f.matches(e))
            if f.limit is not None and len(found) >= f.limit:
                return found[: f.limit]
            if last >= upto:
                return found
            first, size = last + 1, min(size * 2, 10_000)

    async def _read_last(self, bucket: int, session_id: str, f: EventFilter) -> list[spi.Event]:
        assert f.last is not None
        floor = (f.after_seq or 0) + 1
        plain = f == EventFilter(last=f.last, after_seq=f.after_seq)
        # A plain window needs its events and the few back to a turn start.
        size = min(f.last + 16 if plain else max(2 * f.last, 64), 10_000)
        reply = await self._fcall(
            bucket, "read_range", session_id, size, floor, "tail", write=False
        )
        top = int(reply[0])
        if top < 0:
            return []
        tail = [codec.read_event(session_id, stored) for stored in reply[2:]]
        upper = top
        matches: list[spi.Event] = []  # newest first
        while upper >= floor:
            lower = max(floor, upper - size + 1)
            if tail:
                events, tail = tail, []
            else:
                _, _, events = await self._range(bucket, session_id, lower, upper)
            matches.extend(e for e in reversed(events) if f.matches(e))
            upper, size = lower - 1, min(size * 2, 10_000)
            if len(matches) >= f.last:
                window = matches[f.last - 1]
                if not f.can_match_turn_start or is_turn_start(window):
                    break
                if any(is_turn_start(e) for e in matches[f.last :]):
                    break
        return apply_filter(reversed(matches), EventFilter(last=f.last))

    async def _active_view(
        self, bucket: int, session_id: str, boundary_seq: int, version: int, f: EventFilter
    ) -> list[spi.Event]:
        _, _, events = await self._range(bucket, session_id, boundary_seq, version)
        boundary, after = events[0], events[1:]
        kept_ids, summaries = compaction_parts(boundary, after)
        kept: list[spi.Event] = []
        if kept_ids:
            stored = await self._fcall(bucket, "read_ids", session_id, *kept_ids, write=False)
            kept = [
                e for e in (codec.read_event(session_id, s) for s in stored) if e.seq < boundary_seq
            ]
        return apply_filter(compose_view(kept, summaries, after), f)

    async def set_narration(
        self, session_id: str, message_id: str, text: str | None, stamp: str
    ) -> bool:
        bucket = await self._locate(session_id)
        if bucket is None:
            return False
        done = await self._fcall(
            bucket, "set_narration", session_id, message_id,
            "0" if text is None else "1", text or "", stamp, write=True,
        )  # fmt: skip
        return bool(done)

    # ---------------------------------------------------------------- vectors and text

    async def vector_index_spec(self) -> spi.VectorIndexSpec | None:
        [document] = await self.nodes.call(
            self._meta, [("HGET", self._meta, "vector")], write=False
        )
        if document is None:
            return None
        dimensions, metric, model = json.loads(document)
        return spi.VectorIndexSpec(int(dimensions), metric, model)

    async def declare_vector_index(self, spec: spi.VectorIndexSpec, *, replace: bool) -> None:
        document = _dumps([spec.dimensions, spec.metric, spec.model])
        command = "HSET" if replace else "HSETNX"
        await self.nodes.call(self._meta, [(command, self._meta, "vector", document)], write=True)

    async def pending_embeddings(
        self, model: str, roles: Sequence[spi.Role], after: str | None, limit: int
    ) -> list[spi.PendingEmbedding]:
        replies = await self._everywhere(
            "pending", model, codec.role_letters(roles), after or "", limit, write=False
        )
        pending: list[spi.PendingEmbedding] = []
        for bucket, reply in enumerate(replies):
            for item in reply:
                message_id = item[0].decode()
                pending.append(
                    spi.PendingEmbedding(
                        message_id, item[1].decode(), codec.ROLES_BY_LETTER[item[2].decode()],
                        item[3].decode(),
                    )
                )  # fmt: skip
                self._message_buckets[message_id] = bucket
        if len(self._message_buckets) > _DIRECTORY_CACHE:
            self._message_buckets.clear()
        pending.sort(key=lambda p: p.message_id)
        return pending[:limit]

    async def count_pending_embeddings(self, model: str, roles: Sequence[spi.Role]) -> int:
        replies = await self._everywhere(
            "count_pending", model, codec.role_letters(roles), write=False
        )
        return sum(int(reply) for reply in replies)

    async def set_embeddings(
        self, model: str, vectors: Sequence[tuple[str, tuple[float, ...]]], stamp: str
    ) -> None:
        if not vectors:
            return
        # A message pending_embeddings gave goes to its bucket; any other to every one
        # (a bucket skips the ids it does not hold).
        by_bucket: dict[int | None, list[Any]] = {}
        for message_id, vector in vectors:
            bucket = self._message_buckets.get(message_id)
            by_bucket.setdefault(bucket, []).extend((message_id, vector_blob(vector), stamp))
        unknown = by_bucket.pop(None, None)
        calls = [
            (fence, ("FCALL", function("set_embeddings"), 1, fence, model, *arguments))
            for bucket, arguments in by_bucket.items()
            if bucket is not None and (fence := self._prefix(bucket) + b"fence")
        ]
        if unknown:
            calls += [
                (fence, ("FCALL", function("set_embeddings"), 1, fence, model, *unknown))
                for fence in (prefix + b"fence" for prefix in self._prefixes)
            ]
        await self.nodes.fan_out(calls, write=True)

    async def _scope_buckets(self, scope: spi.SearchScope) -> list[int] | None:
        """The buckets a search looks in (None: every one; []: none)."""
        if scope.session_id is not None:
            bucket = await self._locate(scope.session_id)
            return [] if bucket is None else [bucket]
        if scope.owner_id is not None:
            return [self._bucket(scope.owner_id)]
        return None

    async def _in_buckets(
        self, buckets: list[int] | None, name: str, *args: Any
    ) -> list[tuple[int, Any]]:
        if buckets is None:
            return list(enumerate(await self._everywhere(name, *args, write=False)))
        return [(b, await self._fcall(b, name, *args, write=False)) for b in buckets]

    async def vector_search(self, query: spi.VectorQuery) -> list[spi.SearchHit]:
        """One session's vectors are scanned; a wider scope asks each bucket's vector
        set (Redis 8) or this process's cache of each bucket's vectors, kept current by
        the bucket's change feed (no vector sets). Either only shortlists: the hits are
        ranked by their stored vectors, exactly, as `top_k` scores them."""
        scope = query.scope
        buckets = await self._scope_buckets(scope)
        if buckets == []:
            return []
        path = self.vector_search_path
        scanned = path == "scan" or scope.session_id is not None or query.model is None
        if scanned or (path == "vector sets" and query.metric != "cosine"):
            # Vector sets rank by cosine only; a euclidean index is scanned.
            found = await self._in_buckets(buckets, "vector_scan", *self._scan_args(query))
            exact = [(b, item[1], item[0], item[2]) for b, reply in found for item in reply]
            return await self._ranked(query, exact, [])
        if path == "vector sets":
            return await self._ranked(query, *await self._from_vector_sets(query, buckets))
        return await self._ranked(query, await self._from_cache(query, buckets), [])

    def _scan_args(self, query: spi.VectorQuery) -> list[Any]:
        scope = query.scope
        return [
            scope.owner_id or "", scope.session_id or "", codec.role_letters(scope.roles),
            query.model or "", len(query.vector) * 4,
        ]  # fmt: skip

    async def _from_vector_sets(
        self, query: spi.VectorQuery, buckets: list[int] | None
    ) -> tuple[list[_Scanned], list[_Shortlisted]]:
        scope = query.scope
        found = await self._in_buckets(
            buckets, "vector_ann", scope.owner_id or "", codec.role_letters(scope.roles),
            query.model or "", len(query.vector), query.k, _candidates(query.k),
            vector_blob(query.vector), _SCANNED_UP_TO,
        )  # fmt: skip
        exact: list[_Scanned] = []
        near: list[_Shortlisted] = []
        for bucket, reply in found:
            if reply[0] == b"scan":
                exact.extend((bucket, item[1], item[0], item[2]) for item in reply[1])
            else:
                items = reply[1:]
                near.extend(
                    (bucket, items[i + 1], items[i], float(items[i + 2]))
                    for i in range(0, len(items), 3)
                )
        return exact, near

    async def _from_cache(
        self, query: spi.VectorQuery, buckets: list[int] | None
    ) -> list[_Scanned]:
        """The shortlist of each bucket's cached vectors (see `vector_cache`), with their
        stored vectors; a bucket whose cache is ahead of what it reads is scanned. (A
        search of one session never comes here: it is scanned.)"""
        targets = list(range(self.buckets)) if buckets is None else buckets
        if self._cache_turn is None:
            self._cache_turn = asyncio.Lock()
        shortlisted: dict[int, list[int]] = {}
        rescan: list[int] = []
        async with self._cache_turn:
            # Read under the turn: no other search brings a table past these positions.
            positions = await self.nodes.fan_out(
                [(self._fence(b), self._command(b, "feed_position")) for b in targets],
                write=False,
            )
            for bucket, (change, pruned) in zip(targets, positions, strict=True):
                cache = self._caches.setdefault(bucket, VectorCache())
                answer = _BucketFeed(self, bucket, Position(0, int(change), int(pruned)))
                rowids = await cache.shortlisted_async(answer, query)
                if rowids is None:
                    rescan.append(bucket)
                elif len(rowids):
                    shortlisted[bucket] = [int(rowid) for rowid in rowids]
        width = len(query.vector) * 4
        rows = await self.nodes.fan_out(
            [
                (
                    self._fence(b),
                    self._command(b, "feed_rows_of", query.model or "", width, len(ids), *ids),
                )
                for b, ids in shortlisted.items()
            ],
            write=False,
        )
        exact: list[_Scanned] = [
            (bucket, row[2], row[4], row[1])
            for bucket, reply in zip(shortlisted, rows, strict=True)
            for row in reply
        ]
        if rescan:
            found = await self._in_buckets(rescan, "vector_scan", *self._scan_args(query))
            exact += [(b, item[1], item[0], item[2]) for b, reply in found for item in reply]
        return exact

    async def _ranked(
        self, query: spi.VectorQuery, exact: list[_Scanned], near: list[_Shortlisted]
    ) -> list[spi.SearchHit]:
        """The ``query.k`` best of the vectors ``exact`` and of the best of ``near``
        (by the similarity a vector set gave them), scored by their stored vectors."""
        width = len(query.vector)
        refs = [(b, session, seq) for b, session, seq, _ in exact]
        if len(refs) > query.k:
            ranked = top_k(
                query.vector, from_blobs([item[3] for item in exact], width), query.metric, query.k
            )
            refs = [refs[row] for row, _ in ranked]
        near.sort(key=lambda item: -item[3])
        refs += [(b, session, seq) for b, session, seq, _ in near[: _candidates(query.k)]]
        if not refs:
            return []
        by_bucket: dict[int, list[Any]] = {}
        for bucket, session, seq in refs:
            by_bucket.setdefault(bucket, []).extend((session, seq))
        replies = await self.nodes.fan_out(
            [
                (self._fence(b), self._command(b, "read_refs", *args))
                for b, args in by_bucket.items()
            ],
            write=False,
        )
        events: dict[tuple[bytes, bytes], spi.Event] = {}
        blobs: dict[tuple[bytes, bytes], bytes] = {}
        for args, stored in zip(by_bucket.values(), replies, strict=True):
            for session, stored_event in zip(args[0::2], stored, strict=True):
                blob, model = stored_event[4], stored_event[5]
                if stored_event[1] is None or blob is None or len(blob) != 4 * width:
                    continue  # deleted, or re-embedded to another width, since
                if query.model is not None and model != query.model.encode():
                    continue
                ref = (session, str(stored_event[0]).encode())
                events[ref] = codec.read_event(session.decode(), stored_event)
                blobs[ref] = blob
        order = list(blobs)
        ranked = top_k(query.vector, from_blobs(list(blobs.values()), width), query.metric, query.k)
        hits = []
        for row, score in ranked:
            event = events[order[row]]
            if isinstance(event, spi.Message):
                hits.append(spi.SearchHit(event, score))
        return hits

    async def text_search(self, query: spi.TextQuery) -> list[spi.SearchHit]:
        scope = query.scope
        buckets = await self._scope_buckets(scope)
        found = await self._in_buckets(
            buckets, "text_search", scope.owner_id or "", scope.session_id or "",
            codec.role_letters(scope.roles), query.k, *query.terms,
        )  # fmt: skip
        hits = []
        for _, reply in found:
            for stored, session, score in reply:
                event = codec.read_event(session.decode(), stored)
                if isinstance(event, spi.Message):
                    hits.append(spi.SearchHit(event, float(score)))
        hits.sort(key=lambda hit: (-hit.score, hit.message.id))
        return hits[: query.k]


class _BucketFeed(Feed):
    """What a bucket answers its vector cache's requests with (see `vector_cache`): its
    functions ``feed_*``, each call one snapshot of the bucket. Successive calls are
    not one snapshot: what changed between them is in the feed after the position the
    cache records, so it is read again at the next search."""

    def __init__(self, backend: RedisBackend, bucket: int, position: Position) -> None:
        self.backend = backend
        self.bucket = bucket
        self._position = position

    async def _call(self, name: str, *args: Any) -> Any:
        return await self.backend._fcall(self.bucket, name, *args, write=False)

    async def position(self) -> Position:
        return self._position

    async def count_vectors(self, model: str | None, width: int) -> int:
        return int((await self._call("stats"))[4])

    async def changes_after(self, change: int) -> Changes:
        members = await self._call("feed_changes", change)
        rowids = sorted({int(m[1:]) for m in members if m.startswith(b"r")})
        return Changes(rowids, [m[1:].decode() for m in members if m.startswith(b"s")])

    async def sessions_of(self, ids: list[str]) -> list[SessionRow]:
        if not ids:
            return []
        rows = await self._call("feed_sessions", *ids)
        return [(r[0].decode(), codec.text(r[1]) or None, codec.text(r[2]) or None) for r in rows]

    async def vectors_after(
        self, model: str | None, width: int, after: int, limit: int
    ) -> list[VectorRow]:
        rows = await self._call("feed_rows", model or "", 4 * width, after, limit)
        return [_feed_row(row) for row in rows]

    async def vectors_of(
        self, model: str | None, width: int, rowids: list[int], sessions: list[str]
    ) -> list[VectorRow]:
        found = await self._call(
            "feed_rows_of", model or "", 4 * width, len(rowids), *rowids, *sessions
        )
        return sorted({row[0]: row for row in map(_feed_row, found)}.values())


def _feed_row(row: Sequence[Any]) -> VectorRow:
    return (int(row[0]), row[1], row[2].decode(), codec.ROLES_BY_LETTER[row[3].decode()].value)


def _with_seq(event: spi.Event, seq: int) -> spi.Event:
    return replace(event, seq=seq)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _raise_refusal(reply: Sequence[Any], session: spi.Session) -> None:
    """Raise what refused inserting ``session`` (the function's reply names it; the
    errors are `decisions`'); return when it was applied."""
    outcome = reply[0]
    if outcome in (b"ok", b"found"):
        return
    if outcome == b"users":
        raise decisions.unknown_users(json.loads(reply[1]))
    # The parent as the function found it: (its owner, what it is a part of).
    parents: dict[bytes, tuple[object, object] | None] = {
        b"parent_missing": None,
        b"parent_is_part": (session.owner_id, session.part_of),
        b"parent_owner": (object(), None),
    }
    if outcome in parents:
        decisions.check_parent(session, parents[outcome])
    raise StoreError(f"unexpected reply from the Redis function: {outcome!r}")


def _no_holder(new: spi.NewSession) -> StoreError:
    """The error for a part whose parent is missing, as `decisions` words it."""
    try:
        decisions.owned_by_parent(new, None)
    except StoreError as error:
        return error
    raise AssertionError("a missing parent is always refused")
