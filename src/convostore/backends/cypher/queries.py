"""Every query of a graph store, written once over a `CypherDialect`.

The graph model (labels and relationship types are these constants, never input):

    (:User {id, display_name, username, email, kind, metadata})
    (:Session {id, owner_id, title, kind, part_of, held_with, created_at,
               last_activity_at, expires_at, metadata, version, stamp, last_seq,
               last_turn_seq, message_count, started_by, participants,
               metadata_entries})
    (:Session)-[:OWNER]->(:User)      (:Session)-[:HELD_WITH]->(:User)
    (:Session)-[:PART_OF]->(:Session) (:Session)-[:HAS_EVENT {seq}]->(:Event)
    (:Event {id, session_id, owner_id, seq, turn_seq, type, created_at, branch,
             metadata, payload, synthetic, kept_event_ids})
    (:Event:Message {... role, content, content_folded, author_id, recipient_ids,
             in_reply_to, tool_calls, tool_call_id, attachments, data, assets,
             narration, embedding, embedding_model, embedding_width, stamp,
             search_text, search_counts, search_length, blank})
    (:Message)-[:AUTHOR]->(:User)     (:Message)-[:RECIPIENT {position}]->(:User)
    (:Message)-[:IN_REPLY_TO]->(:Event)
    (:Message)-[:HAS_ATTACHMENT {position}]->(:Attachment)
    (:Message)-[:HAS_DATA {position}]->(:DataAttachment)
    (:Message)-[:HAS_ASSET {position}]->(:Asset)
    (:ConvostoreSchema {key, version, indexed_keys, vector_dimensions,
                        vector_metric, vector_model})

Maps cannot be property values: JSON travels and is kept as text. Times are integers of
microseconds since the epoch. A message's list-valued parts are kept twice: as JSON text
on the message (what a read returns, in one row) and as relationships and nodes (what a
user's own Cypher walks). A message also keeps ``search_text`` (its words as every
backend splits them, each once, for the full-text index, with ``search_counts``, how
often each occurs), ``content_folded`` (its lowercase form, where it differs and the
text is not ASCII, for the case-insensitive text filter) and ``turn_seq`` (the seq of
the turn start at or before it, so a window extends to its turn with one lookup).

Each write is one query: its checks are in its WHERE clauses, and a query that wrote
nothing is followed, on that rare path only, by one that finds out why.
"""

from __future__ import annotations

import functools
from typing import Final

from convostore.backends import spi
from convostore.backends.cypher.dialect import CypherDialect
from convostore.model import SessionOrder

__all__ = ["EVENT_CONDITIONS", "INDEXED_PROPERTIES", "CypherQueries"]

USER_FIELDS: Final = ("id", "display_name", "username", "email", "kind", "metadata")
SESSION_FIELDS: Final = (
    "id", "owner_id", "title", "kind", "part_of", "held_with", "created_at",
    "last_activity_at", "expires_at", "metadata", "version", "stamp",
)  # fmt: skip
EVENT_FIELDS: Final = (
    "session_id", "seq", "id", "type", "created_at", "branch", "metadata", "payload",
    "synthetic", "role", "content", "author_id", "recipient_ids", "in_reply_to",
    "tool_calls", "tool_call_id", "attachments", "data", "assets", "narration",
    "embedding", "embedding_model", "stamp",
)  # fmt: skip
# The range index behind every lookup and listing key: (label, property).
INDEXED_PROPERTIES: Final = (
    ("User", "id"),
    ("Session", "id"),
    ("Session", "owner_id"),
    ("Session", "part_of"),
    ("Session", "last_activity_at"),
    ("Session", "expires_at"),
    ("Session", "metadata_entries"),
    ("Event", "id"),
    ("Event", "session_id"),
    ("Event", "seq"),
    ("Event", "type"),
)
FULLTEXT: Final = ("Message", "search_text")
VECTOR: Final = ("Message", "embedding")
SCHEMA_LABEL: Final = "ConvostoreSchema"


def columns(fields: tuple[str, ...], alias: str) -> str:
    return ", ".join(f"{alias}.{name}" for name in fields)


USER_COLUMNS: Final = columns(USER_FIELDS, "u")
SESSION_COLUMNS: Final = columns(SESSION_FIELDS, "s")
EVENT_COLUMNS: Final = columns(EVENT_FIELDS, "e")
# A summary row: the session's columns, its message count, its owner's columns, then the
# columns of the author of its first message (users o and b).
SUMMARY_COLUMNS: Final = (
    f"{SESSION_COLUMNS}, s.message_count, {columns(USER_FIELDS, 'o')}, {columns(USER_FIELDS, 'b')}"
)
_SUMMARY_JOINS = (
    " OPTIONAL MATCH (o:User {id: s.owner_id}) OPTIONAL MATCH (b:User {id: s.started_by})"
)
# The users of a call that are inserted if absent (an existing user is not overwritten).
_INSERT_USERS = (
    "FOREACH (given IN $users | MERGE (u:User {id: given.id}) ON CREATE SET"
    " u.display_name = given.display_name, u.username = given.username,"
    " u.email = given.email, u.kind = given.kind, u.metadata = given.metadata)"
)
# The required user ids (given by id, so they must be stored) that are not.
_MISSING_USERS = (
    " OPTIONAL MATCH (known:User) WHERE known.id IN $required_users"
    " WITH {carried}, collect(known.id) AS known_ids"
    " WITH {carried}, [r IN $required_users WHERE NOT r IN known_ids] AS missing"
)
# Deletes the sessions in `doomed` (a list of nodes), their events and the nodes of
# their messages' parts, walking the relationships from each session (an index lookup
# by a list computed in the query would scan every event); `deleted` is carried to the
# RETURN.
_DELETE_SESSIONS = (
    " UNWIND CASE WHEN size(doomed) = 0 THEN [null] ELSE doomed END AS d"
    " OPTIONAL MATCH (d)-[:HAS_EVENT]->(e)"
    " OPTIONAL MATCH (e)-[:HAS_ATTACHMENT|HAS_DATA|HAS_ASSET]->(part)"
    " WITH deleted, doomed, collect(DISTINCT e) AS events, collect(DISTINCT part) AS parts"
    " FOREACH (n IN parts | DETACH DELETE n)"
    " FOREACH (n IN events | DETACH DELETE n)"
    " FOREACH (n IN doomed | DETACH DELETE n)"
    " RETURN deleted"
)

# The EventFilter conditions, in the order their fragments are joined: (the filter's
# attribute, its fragment over the event alias {a}).
EVENT_CONDITIONS: Final = (
    ("types", " AND {a}.type IN $types"),
    ("roles", " AND {a}.role IN $roles"),
    ("exclude_synthetic", " AND NOT {a}.synthetic"),
    ("branch", " AND ({a}.branch IS NULL OR {a}.branch IN $lineage)"),
    ("since", " AND {a}.created_at >= $since"),
    ("until", " AND {a}.created_at <= $until"),
    # Literal and case-insensitive as Python's `needle.lower() in content.lower()`:
    # CONTAINS has no wildcards; content_folded is content.lower() where that differs
    # from content and content is not ASCII (whose toLower() is Python's).
    ("text", " AND coalesce({a}.content_folded, toLower({a}.content)) CONTAINS $text"),
    ("after_seq", " AND {a}.seq > $after_seq"),
)
# Conditions every turn start passes whatever their values (a turn start is a root,
# non-synthetic user message), so the nearest turn start among the matches is the
# nearest in the log: the window's first event's turn_seq.
TURN_TRANSPARENT: Final = frozenset({"types", "roles", "exclude_synthetic", "branch"})
_IS_TURN_START = (
    " AND {a}.type = 'MESSAGE' AND {a}.role = 'user' AND {a}.branch IS NULL AND NOT {a}.synthetic"
)


def conditions_sql(conditions: tuple[bool, ...], alias: str) -> str:
    return "".join(
        fragment.format(a=alias)
        for (_, fragment), used in zip(EVENT_CONDITIONS, conditions, strict=True)
        if used
    )


class CypherQueries:
    """The queries of a graph store in one dialect (see the module's docstring)."""

    def __init__(self, dialect: CypherDialect) -> None:
        self.dialect = dialect
        vector = dialect.vector_value("item.vector")
        self.set_embeddings: Final = (
            "UNWIND $items AS item MATCH (m:Event {id: item.id}) WHERE m.type = 'MESSAGE'"
            f" SET m.embedding = {vector}, m.embedding_model = $model,"
            " m.embedding_width = size(item.vector), m.stamp = item.stamp"
        )
        self.append: Final = _append(dialect)
        self.update_session: Final = _update_session(dialect)
        keyset_lock = dialect.lock("keyset")
        self.insert_session: Final = "WITH null AS found" + _insert_session(keyset_lock)
        self.delete_expired: Final = _delete_expired(dialect.lock("s"))
        # Where writes interleave, a part's parent is locked first: callers looking for
        # the same part queue there, and every one settles on the earliest.
        self.find_or_insert_part: Final = (
            f"OPTIONAL MATCH (held:Session {{id: $part_of}}){dialect.lock('held')}"
            f" WITH count(held) AS locked {_FIND_PART}{_insert_session(keyset_lock)}"
            if dialect.lock_template
            else FIND_OR_INSERT_PART
        )

    # ---------------------------------------------------------------- schema

    def range_indexes(self) -> list[tuple[str, str, str]]:
        """(label, property, DDL) of every range index."""
        return [
            (label, prop, self.dialect.range_index(label, prop))
            for label, prop in INDEXED_PROPERTIES
        ]

    def fulltext_index(self) -> str:
        return self.dialect.fulltext_index(*FULLTEXT)

    def vector_index(self, dimensions: int, metric: spi.Metric) -> str:
        return self.dialect.vector_index(*VECTOR, dimensions, metric)

    def drop_vector_index(self) -> str:
        return self.dialect.drop_vector_index(*VECTOR)

    # ---------------------------------------------------------------- searching

    @functools.cache  # noqa: B019 (one instance per dialect, kept for the process)
    def vector_search(
        self, indexed: bool, metric: spi.Metric, by_model: bool, scope: tuple[bool, bool, bool]
    ) -> str:
        """The nearest messages with their distances. Indexed: the index is asked for
        $fetch nodes, of which those in scope (and of the model and width) are kept, the
        $k nearest by the metric's distance (an index may order by a similarity of its
        own, of quantised vectors: the first k it gives are not always the nearest); the
        first column says how many the index gave, so the caller can ask again for more
        when the scope left fewer than k. A scan: every message of the width (and model)
        in scope is scored. Parameters: vector, width, model, owner_id, session_id,
        roles, k, fetch."""
        if indexed:
            query = self.dialect.vector_query(*VECTOR, "fetch", "vector", metric)
            return (
                f"{query} WITH collect([node, score]) AS found"
                f" WITH size(found) AS fetched,"
                f" [f IN found WHERE {_wanted('f[0]', by_model, scope)}] AS kept"
                " UNWIND CASE WHEN size(kept) = 0 THEN [null] ELSE kept END AS hit"
                " WITH fetched, hit[0] AS e, hit[1] AS distance ORDER BY distance LIMIT $k"
                f" RETURN fetched, distance, {EVENT_COLUMNS}"
            )
        distance = self.dialect.distance(
            metric, "n.embedding", self.dialect.vector_value("$vector")
        )
        return (
            f"MATCH (n:Message) WHERE {_wanted('n', by_model, scope)}"
            f" WITH n AS e, {distance} AS distance"
            f" ORDER BY distance LIMIT $k RETURN 0, distance, {EVENT_COLUMNS}"
        )

    @functools.cache  # noqa: B019
    def vector_scan_of_a_small_scope(
        self, metric: spi.Metric, by_model: bool, scope: tuple[bool, bool, bool]
    ) -> str:
        """The exact scan of a scope holding at most $most messages of the width (and
        model): its $k nearest with their distances. The first column is how many the
        scope holds, counted up to $counted (one more than $most); above $most no message
        is scored (the caller asks the index instead). Parameters: vector, width, model,
        owner_id, session_id, roles, k, most, counted."""
        distance = self.dialect.distance(
            metric, "e.embedding", self.dialect.vector_value("$vector")
        )
        return (
            f"MATCH (n:Message) WHERE {_wanted('n', by_model, scope)}"
            " WITH n LIMIT $counted WITH collect(n) AS scoped"
            " WITH size(scoped) AS in_scope,"
            " CASE WHEN size(scoped) > $most THEN [] ELSE scoped END AS kept"
            " UNWIND CASE WHEN size(kept) = 0 THEN [null] ELSE kept END AS e"
            f" WITH in_scope, e, CASE WHEN e IS NULL THEN null ELSE {distance} END AS distance"
            f" ORDER BY distance LIMIT $k RETURN in_scope, distance, {EVENT_COLUMNS}"
        )

    @functools.cache  # noqa: B019
    def text_search(self, scope: tuple[bool, bool, bool]) -> str:
        """The k messages holding every term, best first: the terms' occurrences over
        the square root of the message's word count, as every backend ranks them.
        Parameters: query, terms, owner_id, session_id, roles, k."""
        return (
            f"{self.dialect.fulltext_query(FULLTEXT[0], 'query')}"
            " WITH node AS e, split(node.search_text, ' ') AS words"
            " WITH e, [i IN range(0, size(words) - 1) WHERE words[i] IN $terms] AS found"
            " WHERE size(found) = size($terms)" + _scope("e", scope) + ""
            " WITH e, reduce(n = 0, i IN found | n + e.search_counts[i]) AS occurrences"
            " WITH e, toFloat(occurrences) / sqrt(toFloat(e.search_length)) AS score"
            f" ORDER BY score DESC, e.id LIMIT $k RETURN score, {EVENT_COLUMNS}"
        )


def _wanted(alias: str, by_model: bool, scope: tuple[bool, bool, bool]) -> str:
    """Messages with a vector of the query's width (and model), in scope."""
    model = f" AND {alias}.embedding_model = $model" if by_model else ""
    return f"{alias}.embedding_width = $width{model}{_scope(alias, scope)}"


def _scope(alias: str, scope: tuple[bool, bool, bool]) -> str:
    owner, session, roles = scope
    return (
        (f" AND {alias}.owner_id = $owner_id" if owner else "")
        + (f" AND {alias}.session_id = $session_id" if session else "")
        + (f" AND {alias}.role IN $roles" if roles else "")
    )


# ---------------------------------------------------------------------------- users

PUT_USER: Final = (
    "MERGE (u:User {id: $id}) SET u.display_name = $display_name, u.username = $username,"
    " u.email = $email, u.kind = $kind, u.metadata = $metadata"
)
GET_USER: Final = f"MATCH (u:User {{id: $id}}) RETURN {USER_COLUMNS}"

# ---------------------------------------------------------------------------- sessions

GET_SESSION: Final = f"MATCH (s:Session {{id: $id}}) RETURN {SESSION_COLUMNS}"
SESSION_EXISTS: Final = "OPTIONAL MATCH (s:Session {id: $id}) RETURN s IS NOT NULL"
SESSION_VERSION: Final = "MATCH (s:Session {id: $id}) RETURN s.version"
# A write keeps the candidate entries ($entries: maps of name and entry) of the keys the
# graph indexes when it runs, or is indexing (see ADD_INDEXING_KEYS): writes never
# interleave, so no key add or drop falls between the look and the write.
_KEYSET = f" OPTIONAL MATCH (keyset:{SCHEMA_LABEL} {{key: $schema_key}})"
# Where writes interleave, a session write locks the keyset before it reads it, so a
# key add or drop (which writes the keyset) comes wholly before or after it.
_KEPT_ENTRIES = (
    "[e IN $entries WHERE e.name IN"
    " (coalesce(keyset.indexed_keys, []) + coalesce(keyset.indexing_keys, [])) | e.entry]"
)
# One query checks the id, the users and the parent (and, for a part, looks for an
# existing one first), then inserts the session with its users and relationships only
# if every check passed, and answers what a refusal needs to say why. A part takes its
# parent's owner when $owner_from_parent.
_FIND_PART = (
    "OPTIONAL MATCH (found:Session) WHERE found.part_of = $part_of"
    " AND found.held_with = $held_with WITH found ORDER BY found.id LIMIT 1"
)
_INSERT_SESSION = (
    _KEYSET + "{keyset_lock} WITH found, " + _KEPT_ENTRIES + " AS entries"
    " OPTIONAL MATCH (existing:Session {id: $id})"
    " OPTIONAL MATCH (parent:Session {id: $part_of})"
    + _MISSING_USERS.format(carried="found, entries, existing, parent")
    + " WITH found, entries, existing, parent, missing,"
    " CASE WHEN $owner_from_parent THEN parent.owner_id ELSE $owner_id END AS owner_id"
    " WITH found, entries, existing, parent, missing, owner_id,"
    " found IS NULL AND existing IS NULL AND size(missing) = 0 AND ($part_of IS NULL OR"
    " (parent IS NOT NULL AND parent.part_of IS NULL"
    " AND coalesce(parent.owner_id, '') = coalesce(owner_id, ''))) AS ok"
    " FOREACH (_ IN CASE WHEN ok THEN [1] ELSE [] END | "
    + _INSERT_USERS
    + " CREATE (s:Session {id: $id, owner_id: owner_id, title: $title, kind: $kind,"
    " part_of: $part_of, held_with: $held_with, created_at: $created_at,"
    " last_activity_at: $last_activity_at, expires_at: $expires_at, metadata: $metadata,"
    " version: 0, stamp: $stamp, last_seq: 0, message_count: 0, participants: [],"
    " metadata_entries: entries})"
    " FOREACH (oid IN CASE WHEN owner_id IS NULL THEN [] ELSE [owner_id] END |"
    " MERGE (o:User {id: oid}) CREATE (s)-[:OWNER]->(o))"
    " FOREACH (hid IN CASE WHEN $held_with IS NULL THEN [] ELSE [$held_with] END |"
    " MERGE (h:User {id: hid}) CREATE (s)-[:HELD_WITH]->(h))"
    " FOREACH (p IN CASE WHEN parent IS NULL THEN [] ELSE [parent] END |"
    " CREATE (s)-[:PART_OF]->(p)))"
    " RETURN ok, existing IS NOT NULL, missing, parent IS NOT NULL, parent.part_of,"
    " parent.owner_id, owner_id, " + columns(SESSION_FIELDS, "found")
)


def _insert_session(keyset_lock: str) -> str:
    return _INSERT_SESSION.replace("{keyset_lock}", keyset_lock)


INSERT_SESSION: Final = "WITH null AS found" + _insert_session("")
FIND_OR_INSERT_PART: Final = _FIND_PART + _insert_session("")


def _update_session(dialect: CypherDialect) -> str:
    """A session's title, metadata and expiry, if its stamp is the one read; the
    dialect's lock on ``s`` comes before the stamp is compared, and on the keyset
    before its keys are read."""
    return (
        "MATCH (s:Session {id: $id})"
        + dialect.lock("s")
        + " WITH s WHERE s.stamp = $expected_stamp"
        + _KEYSET
        + dialect.lock("keyset")
        + " SET s.title = $title, s.metadata = $metadata, s.expires_at = $expires_at,"
        " s.stamp = $new_stamp, s.metadata_entries = "
        + _KEPT_ENTRIES
        + f" RETURN {SESSION_COLUMNS}"
    )


SET_TITLE: Final = (
    f"MATCH (s:Session {{id: $id}}) SET s.title = $title, s.stamp = $stamp RETURN {SESSION_COLUMNS}"
)
DELETE_SESSION: Final = (
    "MATCH (s:Session {id: $id}) OPTIONAL MATCH (part:Session)-[:PART_OF]->(s)"
    " WITH s, collect(part) AS parts WITH 1 AS deleted, [s] + parts AS doomed" + _DELETE_SESSIONS
)


def _delete_expired(lock: str) -> str:
    """Deletes the sessions expired before $before. A part of an expired parent goes
    with its parent, so only the sessions deleted in their own right are counted.
    Where writes interleave (``lock``: the dialect's lock on ``s``), each expired
    session is locked and its expiry read again, so one extended meanwhile stays."""
    recheck = f"{lock} WITH s WHERE s.expires_at < $before" if lock else ""
    return (
        "OPTIONAL MATCH (s:Session) WHERE s.expires_at < $before" + recheck + ""
        " WITH collect(s) AS expired WITH expired, [x IN expired | x.id] AS expired_ids"
        " WITH [x IN expired WHERE x.part_of IS NULL OR NOT x.part_of IN expired_ids] AS targets"
        " UNWIND CASE WHEN size(targets) = 0 THEN [null] ELSE targets END AS target"
        " OPTIONAL MATCH (part:Session)-[:PART_OF]->(target)"
        " WITH targets, collect(part) AS parts"
        " WITH size(targets) AS deleted, targets + parts AS doomed" + _DELETE_SESSIONS
    )


SESSIONS_BY_METADATA: Final = (
    f"MATCH (s:Session) WHERE $entry IN s.metadata_entries RETURN {SESSION_COLUMNS} ORDER BY s.id"
)
SESSIONS_WITH_METADATA: Final = "MATCH (s:Session) RETURN s.id, s.metadata ORDER BY s.id"
FIND_PART: Final = (
    "MATCH (s:Session) WHERE s.part_of = $part_of AND s.held_with = $held_with"
    f" RETURN {SESSION_COLUMNS} ORDER BY s.id LIMIT 1"
)
LIST_PARTS: Final = (
    "MATCH (s:Session) WHERE s.part_of = $part_of WITH s ORDER BY s.id"
    f"{_SUMMARY_JOINS} RETURN {SUMMARY_COLUMNS} ORDER BY s.id"
)
PARTICIPANTS: Final = (
    "MATCH (s:Session {id: $id}) UNWIND range(0, size(s.participants) - 1) AS i"
    f" MATCH (u:User {{id: s.participants[i]}}) RETURN {USER_COLUMNS} ORDER BY i"
)

# Strings are compared through toString(): FalkorDB 4.16 hands a range over an indexed
# string property to its index, which ignores it (every id would be "before" the bound).
_LISTING_AFTER = {
    SessionOrder.CREATED: " AND toString(s.id) < $after_id",
    SessionOrder.LAST_ACTIVITY: (
        " AND (s.last_activity_at < $after_at"
        " OR (s.last_activity_at = $after_at AND toString(s.id) < $after_id))"
    ),
}
_LISTING_ORDER = {
    SessionOrder.CREATED: " ORDER BY s.id DESC",
    SessionOrder.LAST_ACTIVITY: " ORDER BY s.last_activity_at DESC, s.id DESC",
}


def _listed(include_parts: bool, by_kind: bool) -> str:
    return (
        "MATCH (s:Session) WHERE s.owner_id = $owner_id"
        + ("" if include_parts else " AND s.part_of IS NULL")
        + (" AND s.kind = $kind" if by_kind else "")
    )


@functools.cache
def listing(
    summaries: bool, order: SessionOrder, include_parts: bool, by_kind: bool, paged: bool
) -> str:
    """A page of an owner's sessions (or summaries), strictly after a keyset when
    ``paged``. Parameters: owner_id, kind, after_id, after_at, limit."""
    query = _listed(include_parts, by_kind) + (_LISTING_AFTER[order] if paged else "")
    query += f" WITH s{_LISTING_ORDER[order]} LIMIT $limit"
    if summaries:
        return query + f"{_SUMMARY_JOINS} RETURN {SUMMARY_COLUMNS}{_LISTING_ORDER[order]}"
    return query + f" RETURN {SESSION_COLUMNS}{_LISTING_ORDER[order]}"


@functools.cache
def count(include_parts: bool, by_kind: bool) -> str:
    return _listed(include_parts, by_kind) + " RETURN count(s)"


# ---------------------------------------------------------------------------- the log


def _append(dialect: CypherDialect) -> str:
    """One query is the whole append: it checks the users, the version and the event
    ids, moves the session on (seq values follow its last_seq, gap-free, since writes
    to a graph run one at a time), then inserts the users, the events with their
    relationships and parts. It returns one row per event, or none when a check
    failed. Parameters: session_id, required_users, event_ids, expected_version,
    count, stamp, activity_at, message_count, started_by, authors, last_turn_offset,
    users, events (see `convostore.backends.cypher.values.event_parameters`)."""
    embedding = dialect.vector_value("w.embedding")
    # Where writes interleave, the session is locked before its version is read: two
    # appends at once queue there, and each sees the other's last_seq.
    locked = f"{dialect.lock('s')} WITH s" if dialect.lock_template else ""
    return (
        "MATCH (s:Session {id: $session_id})"
        + locked
        + _MISSING_USERS.format(carried="s")
        + " OPTIONAL MATCH (clash:Event) WHERE clash.id IN $event_ids"
        " WITH s, missing, count(clash) AS clashes"
        " WHERE size(missing) = 0 AND clashes = 0"
        " AND ($expected_version IS NULL OR s.version = $expected_version)"
        " WITH s, s.last_seq AS base, s.last_turn_seq AS prior_turn"
        " SET s.version = s.version + 1, s.last_seq = base + $count, s.stamp = $stamp,"
        " s.last_turn_seq = CASE WHEN $last_turn_offset IS NULL THEN prior_turn"
        " ELSE base + $last_turn_offset END,"
        " s.last_activity_at = CASE WHEN $activity_at IS NOT NULL"
        " AND $activity_at > s.last_activity_at THEN $activity_at ELSE s.last_activity_at END,"
        " s.message_count = s.message_count + $message_count,"
        " s.started_by = coalesce(s.started_by, $started_by),"
        " s.participants = s.participants + [a IN $authors WHERE NOT a IN s.participants]"
        " WITH s, base, prior_turn " + _INSERT_USERS + " WITH s, base, prior_turn"
        " UNWIND $events AS w"
        " CREATE (s)-[:HAS_EVENT {seq: base + w.offset}]->(e:Event {id: w.id,"
        " session_id: $session_id, owner_id: s.owner_id, seq: base + w.offset,"
        " turn_seq: CASE WHEN w.turn_offset IS NULL THEN prior_turn"
        " ELSE base + w.turn_offset END, type: w.type, created_at: w.created_at,"
        " branch: w.branch, metadata: w.metadata, payload: w.payload,"
        " synthetic: w.synthetic, kept_event_ids: w.kept_event_ids})"
        " FOREACH (_ IN CASE WHEN w.role IS NULL THEN [] ELSE [1] END |"
        " SET e:Message, e.role = w.role, e.content = w.content,"
        " e.content_folded = w.content_folded, e.author_id = w.author_id,"
        " e.recipient_ids = w.recipient_ids, e.in_reply_to = w.in_reply_to,"
        " e.tool_calls = w.tool_calls, e.tool_call_id = w.tool_call_id,"
        " e.attachments = w.attachments, e.data = w.data, e.assets = w.assets,"
        f" e.embedding = CASE WHEN w.embedding IS NULL THEN null ELSE {embedding} END,"
        " e.embedding_model = w.embedding_model, e.embedding_width = w.embedding_width,"
        " e.stamp = w.stamp, e.search_text = w.search_text, e.search_counts = w.search_counts,"
        " e.search_length = w.search_length, e.blank = w.blank)"
        " FOREACH (aid IN CASE WHEN w.author_id IS NULL THEN [] ELSE [w.author_id] END |"
        " MERGE (author:User {id: aid}) CREATE (e)-[:AUTHOR]->(author))"
        " FOREACH (i IN range(0, size(w.recipients) - 1) |"
        " MERGE (r:User {id: w.recipients[i]}) CREATE (e)-[:RECIPIENT {position: i}]->(r))"
        " FOREACH (x IN w.attachment_nodes | CREATE (e)-[:HAS_ATTACHMENT"
        " {position: x.position}]->(:Attachment {id: x.id, filename: x.filename,"
        " mime_type: x.mime_type, size_bytes: x.size_bytes, content_hash: x.content_hash,"
        " storage_uri: x.storage_uri, created_at: x.created_at}))"
        " FOREACH (x IN w.data_nodes | CREATE (e)-[:HAS_DATA {position: x.position}]->"
        "(:DataAttachment {id: x.id, type: x.type, title: x.title, json: x.json}))"
        " FOREACH (x IN w.asset_nodes | CREATE (e)-[:HAS_ASSET {position: x.position}]->"
        "(:Asset {asset_id: x.asset_id, name: x.name, mime_type: x.mime_type,"
        " size_bytes: x.size_bytes, content_hash: x.content_hash,"
        " storage_uri: x.storage_uri, created_at: x.created_at}))"
        " WITH s, e, w OPTIONAL MATCH (target:Event {id: w.in_reply_to})"
        " FOREACH (t IN CASE WHEN target IS NULL THEN [] ELSE [target] END |"
        " CREATE (e)-[:IN_REPLY_TO]->(t))"
        " RETURN s.last_seq LIMIT 1"
    )


# Why an append wrote nothing: the session's version (null: no session) and the
# required user ids that are not stored, in the order given.
APPEND_REFUSAL: Final = (
    "OPTIONAL MATCH (s:Session {id: $session_id})"
    + _MISSING_USERS.format(carried="s")
    + " RETURN s.version, missing"
)
EVENTS_WITH_IDS: Final = f"MATCH (e:Event) WHERE e.id IN $ids RETURN {EVENT_COLUMNS}"
SET_NARRATION: Final = (
    "MATCH (e:Event {id: $message_id}) WHERE e.session_id = $session_id"
    " AND e.type = 'MESSAGE' SET e.narration = $text, e.stamp = $stamp RETURN count(e)"
)

_MATCHES = "MATCH (e:Event) WHERE e.session_id = $session_id"


@functools.cache
def forward(conditions: tuple[bool, ...], bounded: bool, limited: bool) -> str:
    """The matches in log order; ``bounded``: only up to seq $upto (a page of an
    unfiltered log, whose seq values have no gaps); ``limited``: the first $limit."""
    return (
        _MATCHES
        + conditions_sql(conditions, "e")
        + (" AND e.seq <= $upto" if bounded else "")
        + f" RETURN {EVENT_COLUMNS} ORDER BY e.seq"
        + (" LIMIT $limit" if limited else "")
    )


@functools.cache
def last(conditions: tuple[bool, ...], unfiltered: bool, turn_transparent: bool) -> str:
    """The newest $last matches, extended back to the nearest matching turn start at or
    before the first of them (none: not extended). Where every turn start matches the
    filter (``turn_transparent``), that is the first match's ``turn_seq``; an unfiltered
    log's window starts at last_seq - $last + 1 with no search at all."""
    where = conditions_sql(conditions, "e")
    if unfiltered:
        # The bound goes through WITH: the MATCH after it looks the range up in the
        # index, where a bound on another pattern's property would filter the whole log.
        head = (
            "MATCH (s:Session {id: $session_id}) WITH s.last_seq - $last AS lowest"
            f" {_MATCHES} AND e.seq > lowest WITH e ORDER BY e.seq LIMIT 1"
        )
    else:
        head = (
            f"{_MATCHES}{where} WITH e ORDER BY e.seq DESC LIMIT $last"
            " WITH e ORDER BY e.seq LIMIT 1"
        )
    if unfiltered or turn_transparent:
        start = f"{head} WITH coalesce(e.turn_seq, e.seq) AS start"
    else:
        start = (
            f"{head} WITH e.seq AS first"
            f" OPTIONAL MATCH (t:Event) WHERE t.session_id = $session_id"
            f"{conditions_sql(conditions, 't')}{_IS_TURN_START.format(a='t')} AND t.seq <= first"
            " WITH first, max(t.seq) AS turn WITH coalesce(turn, first) AS start"
        )
    return f"{start} {_MATCHES}{where} AND e.seq >= start RETURN {EVENT_COLUMNS} ORDER BY e.seq"


# The newest compaction boundary and what its view is composed from: every event from
# it on, and the events it keeps (each once, however often named), each found by an
# index lookup, so the read costs what the view holds, not the whole log. No row: the
# log has no compaction.
ACTIVE_VIEW_PARTS: Final = (
    "MATCH (b:Event) WHERE b.session_id = $session_id AND b.type = 'COMPACTION'"
    " WITH b ORDER BY b.seq DESC LIMIT 1"
    " WITH b.seq AS boundary, coalesce(b.kept_event_ids, []) AS kept"
    f" {_MATCHES} AND e.seq >= boundary"
    " WITH boundary, kept, collect(e) AS later"
    " UNWIND CASE WHEN size(kept) = 0 THEN [null] ELSE kept END AS kept_id"
    " OPTIONAL MATCH (k:Event {id: kept_id})"
    " WITH boundary, later, collect(DISTINCT CASE WHEN k.session_id = $session_id"
    " AND k.seq < boundary THEN k END) AS earlier"
    f" UNWIND earlier + later AS e RETURN boundary, {EVENT_COLUMNS} ORDER BY e.seq"
)

# ---------------------------------------------------------------------------- embeddings

_PENDING = (
    "MATCH (m:Message) WHERE m.role IN $roles AND NOT m.blank"
    " AND (m.embedding_model IS NULL OR m.embedding_model <> $model)"
)
PENDING_PAGE: Final = (
    _PENDING + " AND toString(m.id) > $after RETURN m.id, m.session_id, m.role, m.content"
    " ORDER BY m.id LIMIT $limit"
)
COUNT_PENDING: Final = _PENDING + " RETURN count(m)"

# ---------------------------------------------------------------------------- schema

SCHEMA_LABEL_KEY: Final = "convostore"
READ_SCHEMA: Final = (
    f"OPTIONAL MATCH (c:{SCHEMA_LABEL} {{key: $key}}) RETURN c.version, c.indexed_keys,"
    " c.vector_dimensions, c.vector_metric, c.vector_model"
)
RECORD_VERSION: Final = f"MERGE (c:{SCHEMA_LABEL} {{key: $key}}) SET c.version = $version"
# Adding keys takes three steps. First the keys are marked as being indexed: every
# write from then on writes their entries (see _KEPT_ENTRIES), though no lookup may
# use them yet. Then the sessions are read, and ADD_INDEXED_KEYS, one query, so one
# transaction, records the keys as indexed and gives each session read with a value for
# one its entries, unless its metadata changed since it was read (that write indexed
# the keys itself). A key dropped since it was marked (REMOVE_INDEXED_KEY clears the
# mark) is neither recorded nor given entries: the drop came last. Run again it writes
# the same: the added keys' old entries go first.
ADD_INDEXING_KEYS: Final = (
    f"MATCH (c:{SCHEMA_LABEL} {{key: $key}})"
    " SET c.indexing_keys = coalesce(c.indexing_keys, [])"
    " + [k IN $added WHERE NOT k IN coalesce(c.indexing_keys, [])]"
)
ADD_INDEXED_KEYS: Final = (
    f"MATCH (c:{SCHEMA_LABEL} {{key: $key}})"
    " WITH c, [k IN $added WHERE (k IN coalesce(c.indexing_keys, []))"
    " OR (k IN coalesce(c.indexed_keys, []))] AS recorded"
    " SET c.indexed_keys = coalesce(c.indexed_keys, [])"
    " + [k IN recorded WHERE NOT k IN coalesce(c.indexed_keys, [])],"
    " c.indexing_keys = [k IN coalesce(c.indexing_keys, []) WHERE NOT k IN recorded]"
    # $prefixes[i] is the entry prefix of $added[i].
    " WITH [i IN range(0, size($added) - 1) WHERE $added[i] IN recorded | $prefixes[i]]"
    " AS kept UNWIND $rows AS row"
    " MATCH (s:Session {id: row.id}) WHERE s.metadata = row.metadata"
    " SET s.metadata_entries = [entry IN coalesce(s.metadata_entries, [])"
    " WHERE NOT any(prefix IN kept WHERE entry STARTS WITH prefix)]"
    " + [entry IN row.entries WHERE any(prefix IN kept WHERE entry STARTS WITH prefix)]"
)
# Dropping a key is one query: it leaves the recorded keys, or the keys being added (an
# add that stopped after marking it), and every entry of it goes. Returns true when the
# key was indexed, false when it was only being added, nothing when neither (and then
# nothing is written).
REMOVE_INDEXED_KEY: Final = (
    f"MATCH (c:{SCHEMA_LABEL} {{key: $key}})"
    " WHERE ($name IN coalesce(c.indexed_keys, []))"
    " OR ($name IN coalesce(c.indexing_keys, []))"
    " WITH c, ($name IN coalesce(c.indexed_keys, [])) AS was_indexed"
    " SET c.indexed_keys = [k IN coalesce(c.indexed_keys, []) WHERE k <> $name],"
    " c.indexing_keys = [k IN coalesce(c.indexing_keys, []) WHERE k <> $name]"
    " WITH c, was_indexed OPTIONAL MATCH (s:Session)"
    " WHERE any(entry IN s.metadata_entries WHERE entry STARTS WITH $prefix)"
    " WITH was_indexed, collect(s) AS sessions"
    " FOREACH (s IN sessions | SET s.metadata_entries ="
    " [entry IN s.metadata_entries WHERE NOT entry STARTS WITH $prefix])"
    " RETURN was_indexed"
)
# Records the vector index: where none is ($replace false) or in place of what is.
RECORD_VECTOR_INDEX: Final = (
    f"MATCH (c:{SCHEMA_LABEL} {{key: $key}}) WHERE $replace OR c.vector_model IS NULL"
    " SET c.vector_dimensions = $dimensions, c.vector_metric = $metric,"
    " c.vector_model = $model RETURN c.vector_dimensions, c.vector_metric, c.vector_model"
)
LIST_INDEXES: Final = "CALL db.indexes() YIELD label, properties, types RETURN label, types"

DATABASE_STATS: Final = (
    "OPTIONAL MATCH (u:User) WITH count(u) AS users"
    " OPTIONAL MATCH (s:Session) WITH users, count(s) AS sessions"
    " OPTIONAL MATCH (e:Event) RETURN users, sessions, count(e),"
    " sum(CASE WHEN e.type = 'MESSAGE' THEN 1 ELSE 0 END),"
    " sum(CASE WHEN e.embedding IS NULL THEN 0 ELSE 1 END)"
)
