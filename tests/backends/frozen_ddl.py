"""The DDL of each SQL backend's migrations as written by hand before the schemas were
rendered from `convostore.backends.sql.tables` (main at 14d27d7), frozen: a database
these made must equal one the rendered migrations make (the ``test_*schema*`` tests),
and never changes."""

MYSQL: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS users (
            id VARCHAR(255) NOT NULL PRIMARY KEY,
            display_name LONGTEXT NOT NULL,
            username LONGTEXT NULL,
            email LONGTEXT NULL,
            kind VARCHAR(16) NOT NULL,
            metadata LONGTEXT NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        """CREATE TABLE IF NOT EXISTS sessions (
            id VARCHAR(255) NOT NULL PRIMARY KEY,
            owner_id VARCHAR(255) NULL,
            title LONGTEXT NULL,
            kind VARCHAR(255) NOT NULL,
            part_of VARCHAR(255) NULL,
            held_with VARCHAR(255) NULL,
            created_at BIGINT NOT NULL,
            last_activity_at BIGINT NOT NULL,
            expires_at BIGINT NULL,
            metadata LONGTEXT NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            last_seq BIGINT NOT NULL DEFAULT 0,
            stamp VARCHAR(64) NOT NULL,
            message_count BIGINT NOT NULL DEFAULT 0,
            started_by VARCHAR(255) NULL,
            is_part TINYINT NOT NULL,
            KEY sessions_by_created (owner_id, is_part, id),
            KEY sessions_by_activity (owner_id, is_part, last_activity_at, id),
            KEY sessions_kind_by_created (owner_id, is_part, kind, id),
            KEY sessions_kind_by_activity (owner_id, is_part, kind, last_activity_at, id),
            KEY sessions_all_by_created (owner_id, id),
            KEY sessions_all_by_activity (owner_id, last_activity_at, id),
            KEY sessions_parts (part_of, held_with, id),
            KEY sessions_expiry (expires_at),
            CONSTRAINT sessions_part_of FOREIGN KEY (part_of) REFERENCES sessions (id)
                ON DELETE CASCADE
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        """CREATE TABLE IF NOT EXISTS events (
            session_id VARCHAR(255) NOT NULL,
            seq BIGINT NOT NULL,
            row_id BIGINT NOT NULL AUTO_INCREMENT,
            id VARCHAR(255) NOT NULL,
            type VARCHAR(64) NOT NULL,
            created_at BIGINT NOT NULL,
            branch LONGTEXT NULL,
            metadata LONGTEXT NOT NULL,
            payload LONGTEXT NULL,
            synthetic TINYINT NOT NULL,
            role VARCHAR(16) NULL,
            content LONGTEXT NULL,
            content_folded LONGTEXT NULL,
            search_tokens LONGTEXT NULL,
            author_id VARCHAR(255) NULL,
            recipient_ids LONGTEXT NULL,
            in_reply_to LONGTEXT NULL,
            tool_calls LONGTEXT NULL,
            tool_call_id LONGTEXT NULL,
            attachments LONGTEXT NULL,
            data LONGTEXT NULL,
            assets LONGTEXT NULL,
            narration LONGTEXT NULL,
            embedding LONGBLOB NULL,
            embedding_model VARCHAR(255) NULL,
            stamp VARCHAR(64) NULL,
            turn_start TINYINT AS (type = 'MESSAGE' AND role = 'user' AND branch IS NULL
                AND synthetic = 0) STORED,
            PRIMARY KEY (session_id, seq),
            UNIQUE KEY events_by_id (id),
            UNIQUE KEY events_by_row (row_id),
            KEY events_by_type (session_id, type, seq),
            KEY events_turn_starts (session_id, turn_start, seq),
            KEY events_by_author (session_id, author_id, seq),
            KEY events_by_model (embedding_model, row_id),
            FULLTEXT KEY events_search (search_tokens),
            CONSTRAINT events_session FOREIGN KEY (session_id) REFERENCES sessions (id)
                ON DELETE CASCADE
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        """CREATE TABLE IF NOT EXISTS indexed_metadata_keys (
            name VARCHAR(64) NOT NULL PRIMARY KEY
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        """CREATE TABLE IF NOT EXISTS session_metadata (
            session_id VARCHAR(255) NOT NULL,
            name VARCHAR(64) NOT NULL,
            value_prefix VARCHAR(512) NOT NULL,
            value LONGTEXT NOT NULL,
            PRIMARY KEY (session_id, name),
            KEY session_metadata_lookup (name, value_prefix),
            CONSTRAINT session_metadata_session FOREIGN KEY (session_id)
                REFERENCES sessions (id) ON DELETE CASCADE
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        """CREATE TABLE IF NOT EXISTS vector_index (
            id TINYINT NOT NULL PRIMARY KEY,
            dimensions INT NOT NULL,
            metric VARCHAR(16) NOT NULL,
            model VARCHAR(255) NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
    ),
    (
        """CREATE TABLE IF NOT EXISTS native_vector_state (
            id TINYINT NOT NULL PRIMARY KEY,
            dimensions INT NOT NULL,
            metric VARCHAR(16) NOT NULL,
            model VARCHAR(255) NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
    ),
    (
        """CREATE TABLE IF NOT EXISTS vector_feed (
            id TINYINT NOT NULL PRIMARY KEY,
            position BIGINT NOT NULL,
            pruned BIGINT NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        "INSERT IGNORE INTO vector_feed (id, position, pruned) VALUES (1, 0, 0)",
        """CREATE TABLE IF NOT EXISTS vector_changes (
            position BIGINT NOT NULL,
            row_id BIGINT NOT NULL,
            session_id VARCHAR(255) NOT NULL,
            PRIMARY KEY (position, row_id, session_id)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC""",
        "CREATE TABLE IF NOT EXISTS native_vector_guard (id TINYINT NOT NULL PRIMARY KEY)"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation} ROW_FORMAT=DYNAMIC",
        "INSERT IGNORE INTO native_vector_guard (id) VALUES (1)",
    ),
)
POSTGRESQL: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE users (
            id text COLLATE "C" PRIMARY KEY,
            display_name text NOT NULL,
            username text,
            email text,
            kind text NOT NULL,
            metadata json NOT NULL
        )""",
        """CREATE TABLE sessions (
            id text COLLATE "C" PRIMARY KEY,
            owner_id text COLLATE "C",
            title text,
            kind text NOT NULL,
            part_of text COLLATE "C" REFERENCES sessions (id) ON DELETE CASCADE,
            held_with text COLLATE "C",
            created_at timestamptz NOT NULL,
            last_activity_at timestamptz NOT NULL,
            expires_at timestamptz,
            metadata json NOT NULL,
            version bigint NOT NULL DEFAULT 0,
            last_seq bigint NOT NULL DEFAULT 0,
            stamp text NOT NULL,
            message_count bigint NOT NULL DEFAULT 0,
            started_by text COLLATE "C"
        )""",
        """CREATE INDEX sessions_top_by_created ON sessions (owner_id, id) WHERE part_of IS NULL""",
        """CREATE INDEX sessions_top_by_activity
        ON sessions (owner_id, last_activity_at, id) WHERE part_of IS NULL""",
        """CREATE INDEX sessions_top_kind_by_created
        ON sessions (owner_id, kind, id) WHERE part_of IS NULL""",
        """CREATE INDEX sessions_top_kind_by_activity
        ON sessions (owner_id, kind, last_activity_at, id) WHERE part_of IS NULL""",
        "CREATE INDEX sessions_by_created ON sessions (owner_id, id)",
        "CREATE INDEX sessions_by_activity ON sessions (owner_id, last_activity_at, id)",
        "CREATE INDEX sessions_parts ON sessions (part_of, held_with, id)",
        """CREATE INDEX sessions_expiry ON sessions (expires_at) WHERE expires_at IS NOT NULL""",
        """CREATE TABLE events (
            session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq bigint NOT NULL,
            id text COLLATE "C" NOT NULL,
            type text NOT NULL,
            created_at timestamptz NOT NULL,
            branch text,
            metadata json NOT NULL,
            payload json,
            synthetic boolean NOT NULL,
            role text,
            content text,
            author_id text COLLATE "C",
            recipient_ids json,
            in_reply_to text,
            tool_calls json,
            tool_call_id text,
            attachments json,
            data json,
            assets json,
            narration text,
            embedding real[],
            embedding_model text,
            stamp text,
            search_terms tsvector,
            search_length integer,
            PRIMARY KEY (session_id, seq)
        )""",
        "CREATE UNIQUE INDEX events_by_id ON events (id)",
        """CREATE INDEX events_turn_starts ON events (session_id, seq)
            WHERE type = 'MESSAGE' AND role = 'user' AND branch IS NULL AND NOT synthetic""",
        """CREATE INDEX events_compactions ON events (session_id, seq) WHERE type = 'COMPACTION'""",
        """CREATE INDEX events_search ON events USING gin (search_terms) WITH (fastupdate = off)""",
        """CREATE TABLE participants (
            session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            user_id text COLLATE "C" NOT NULL,
            first_seq bigint NOT NULL,
            PRIMARY KEY (session_id, user_id)
        )""",
        "CREATE INDEX participants_in_order ON participants (session_id, first_seq)",
        'CREATE TABLE indexed_metadata_keys (name text COLLATE "C" PRIMARY KEY)',
        """CREATE TABLE session_metadata (
            name text COLLATE "C" NOT NULL,
            value text COLLATE "C" NOT NULL,
            session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            PRIMARY KEY (name, value, session_id)
        )""",
        "CREATE INDEX session_metadata_by_session ON session_metadata (session_id)",
        """CREATE TABLE vector_index (
            id integer PRIMARY KEY CHECK (id = 1),
            dimensions integer NOT NULL CHECK (dimensions > 0),
            metric text NOT NULL CHECK (metric IN ('cosine', 'euclidean')),
            model text NOT NULL
        )""",
    ),
    (
        "ALTER TABLE session_metadata DROP CONSTRAINT session_metadata_pkey",
        """CREATE UNIQUE INDEX session_metadata_by_value
            ON session_metadata (name, md5(value), session_id)""",
    ),
    (
        """CREATE FUNCTION convostore_value_digest(value text) RETURNS bytea
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN sha256(convert_to(value, 'UTF8'))""",
        "DROP INDEX session_metadata_by_value",
        """CREATE UNIQUE INDEX session_metadata_by_value
            ON session_metadata (name, convostore_value_digest(value), session_id)""",
    ),
)
SQLITE: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE users (
            id TEXT PRIMARY KEY,
            display_name TEXT NOT NULL,
            username TEXT,
            email TEXT,
            kind TEXT NOT NULL,
            metadata TEXT NOT NULL
        )""",
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            owner_id TEXT,
            title TEXT,
            kind TEXT NOT NULL,
            part_of TEXT REFERENCES sessions (id) ON DELETE CASCADE,
            held_with TEXT,
            created_at INTEGER NOT NULL,
            last_activity_at INTEGER NOT NULL,
            expires_at INTEGER,
            metadata TEXT NOT NULL,
            version INTEGER NOT NULL DEFAULT 0,
            last_seq INTEGER NOT NULL DEFAULT 0,
            stamp TEXT NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            started_by TEXT
        )""",
        """CREATE INDEX sessions_top_by_created ON sessions (owner_id, id) WHERE part_of IS NULL""",
        """CREATE INDEX sessions_top_by_activity
        ON sessions (owner_id, last_activity_at, id) WHERE part_of IS NULL""",
        """CREATE INDEX sessions_top_kind_by_created
        ON sessions (owner_id, kind, id) WHERE part_of IS NULL""",
        """CREATE INDEX sessions_top_kind_by_activity
        ON sessions (owner_id, kind, last_activity_at, id) WHERE part_of IS NULL""",
        "CREATE INDEX sessions_by_created ON sessions (owner_id, id)",
        "CREATE INDEX sessions_by_activity ON sessions (owner_id, last_activity_at, id)",
        "CREATE INDEX sessions_parts ON sessions (part_of, held_with, id)",
        """CREATE INDEX sessions_expiry ON sessions (expires_at) WHERE expires_at IS NOT NULL""",
        """CREATE TABLE events (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            id TEXT NOT NULL,
            type TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            branch TEXT,
            metadata TEXT NOT NULL,
            payload TEXT,
            synthetic INTEGER NOT NULL,
            role TEXT,
            content TEXT,
            author_id TEXT,
            recipient_ids TEXT,
            in_reply_to TEXT,
            tool_calls TEXT,
            tool_call_id TEXT,
            attachments TEXT,
            data TEXT,
            assets TEXT,
            narration TEXT,
            embedding BLOB,
            embedding_model TEXT,
            stamp TEXT
        )""",
        "CREATE UNIQUE INDEX events_by_seq ON events (session_id, seq)",
        "CREATE UNIQUE INDEX events_by_id ON events (id)",
        """CREATE INDEX events_turn_starts ON events (session_id, seq)
            WHERE type = 'MESSAGE' AND role = 'user' AND branch IS NULL AND synthetic = 0""",
        """CREATE INDEX events_compactions ON events (session_id, seq) WHERE type = 'COMPACTION'""",
        """CREATE TABLE participants (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            first_seq INTEGER NOT NULL,
            PRIMARY KEY (session_id, user_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX participants_in_order ON participants (session_id, first_seq)",
        """CREATE TRIGGER events_add_participant AFTER INSERT ON events
            WHEN NEW.author_id IS NOT NULL
        BEGIN
            INSERT INTO participants (session_id, user_id, first_seq)
                VALUES (NEW.session_id, NEW.author_id, NEW.seq)
                ON CONFLICT DO NOTHING;
        END""",
        "CREATE TABLE indexed_metadata_keys (name TEXT PRIMARY KEY) WITHOUT ROWID",
        """CREATE TABLE session_metadata (
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            PRIMARY KEY (name, value, session_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX session_metadata_by_session ON session_metadata (session_id)",
        """CREATE TABLE owner_session_counts (
            owner_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            is_part INTEGER NOT NULL,
            sessions INTEGER NOT NULL,
            PRIMARY KEY (owner_id, kind, is_part)
        ) WITHOUT ROWID""",
        """CREATE TRIGGER sessions_count_insert AFTER INSERT ON sessions
            WHEN NEW.owner_id IS NOT NULL
        BEGIN
            INSERT INTO owner_session_counts (owner_id, kind, is_part, sessions)
                VALUES (NEW.owner_id, NEW.kind, NEW.part_of IS NOT NULL, 1)
                ON CONFLICT DO UPDATE SET sessions = sessions + 1;
        END""",
        """CREATE TRIGGER sessions_count_delete AFTER DELETE ON sessions
            WHEN OLD.owner_id IS NOT NULL
        BEGIN
            UPDATE owner_session_counts SET sessions = sessions - 1
                WHERE owner_id = OLD.owner_id AND kind = OLD.kind
                AND is_part = (OLD.part_of IS NOT NULL);
        END""",
    ),
    (
        """CREATE VIRTUAL TABLE events_fts USING fts5 (
            content, content = 'events', content_rowid = 'rowid',
            tokenize = 'unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER events_fts_insert AFTER INSERT ON events
            WHEN NEW.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (rowid, content) VALUES (NEW.rowid, NEW.content);
        END""",
        """CREATE TRIGGER events_fts_delete AFTER DELETE ON events
            WHEN OLD.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (events_fts, rowid, content)
                VALUES ('delete', OLD.rowid, OLD.content);
        END""",
        """INSERT INTO events_fts (rowid, content)
            SELECT rowid, content FROM events WHERE type = 'MESSAGE'""",
        """CREATE TABLE vector_index (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            dimensions INTEGER NOT NULL,
            metric TEXT NOT NULL,
            model TEXT NOT NULL
        )""",
        """CREATE INDEX events_by_model ON events (embedding_model)
            WHERE type = 'MESSAGE' AND embedding IS NOT NULL""",
    ),
    (
        """CREATE TABLE vector_generation (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            generation INTEGER NOT NULL
        )""",
        "INSERT INTO vector_generation (id, generation) VALUES (1, 0)",
        """CREATE TRIGGER events_vector_update
            AFTER UPDATE OF type, session_id, role, embedding, embedding_model ON events
            WHEN OLD.embedding IS NOT NULL OR NEW.embedding IS NOT NULL
        BEGIN
            UPDATE vector_generation SET generation = generation + 1 WHERE id = 1;
        END""",
        """CREATE TRIGGER events_vector_delete AFTER DELETE ON events
        BEGIN
            UPDATE vector_generation SET generation = generation + 1 WHERE id = 1;
        END""",
        """CREATE TRIGGER sessions_owner_update AFTER UPDATE OF owner_id ON sessions
        BEGIN
            UPDATE vector_generation SET generation = generation + 1 WHERE id = 1;
        END""",
    ),
    (
        "DROP TRIGGER events_fts_insert",
        "DROP TRIGGER events_fts_delete",
        "DROP TABLE events_fts",
        """CREATE VIRTUAL TABLE events_fts USING fts5 (
            words, content = '', tokenize = 'ascii'
        )""",
        """CREATE TRIGGER events_fts_insert AFTER INSERT ON events
            WHEN NEW.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (rowid, words)
                VALUES (NEW.rowid, convostore_tokens(NEW.content));
        END""",
        """CREATE TRIGGER events_fts_delete AFTER DELETE ON events
            WHEN OLD.type = 'MESSAGE'
        BEGIN
            INSERT INTO events_fts (events_fts, rowid, words)
                VALUES ('delete', OLD.rowid, convostore_tokens(OLD.content));
        END""",
        """INSERT INTO events_fts (rowid, words)
            SELECT rowid, convostore_tokens(content) FROM events WHERE type = 'MESSAGE'""",
    ),
    (
        """CREATE TABLE IF NOT EXISTS vector_changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        event_rowid INTEGER NOT NULL
    )""",
        """CREATE TABLE IF NOT EXISTS vector_changes_pruned (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        through INTEGER NOT NULL
    )""",
        "INSERT OR IGNORE INTO vector_changes_pruned (id, through) VALUES (1, 0)",
        "DROP TRIGGER IF EXISTS events_vector_update",
        "DROP TRIGGER IF EXISTS events_vector_delete",
        """CREATE TRIGGER IF NOT EXISTS events_vector_insert AFTER INSERT ON events
        WHEN NEW.embedding IS NOT NULL
    BEGIN
        INSERT INTO vector_changes (event_rowid) VALUES (NEW.rowid);
    END""",
        """CREATE TRIGGER IF NOT EXISTS events_vector_update
        AFTER UPDATE OF type, session_id, role, embedding, embedding_model ON events
        WHEN OLD.embedding IS NOT NULL OR NEW.embedding IS NOT NULL
    BEGIN
        INSERT INTO vector_changes (event_rowid) VALUES (NEW.rowid);
    END""",
        """CREATE TRIGGER IF NOT EXISTS events_vector_delete AFTER DELETE ON events
        WHEN OLD.embedding IS NOT NULL
    BEGIN
        INSERT INTO vector_changes (event_rowid) VALUES (OLD.rowid);
    END""",
        """CREATE TRIGGER IF NOT EXISTS vector_changes_prune AFTER INSERT ON vector_changes
        WHEN NEW.id % 4096 = 0 AND NEW.id > 262144
    BEGIN
        DELETE FROM vector_changes WHERE id <= NEW.id - 262144;
        UPDATE vector_changes_pruned SET through = NEW.id - 262144 WHERE id = 1;
    END""",
        "UPDATE vector_generation SET generation = generation + 1 WHERE id = 1",
    ),
    (
        """CREATE TABLE text_index_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            indexed_through INTEGER NOT NULL
        )""",
        """INSERT INTO text_index_state (id, indexed_through)
            VALUES (1, (SELECT coalesce(max(rowid), 0) FROM events))""",
        "DROP TRIGGER events_fts_insert",
        "DROP TRIGGER events_fts_delete",
        """CREATE TRIGGER events_fts_delete AFTER DELETE ON events
        BEGIN
            INSERT INTO events_fts (events_fts, rowid, words)
                SELECT 'delete', OLD.rowid, convostore_tokens(OLD.content)
                WHERE OLD.type = 'MESSAGE'
                AND OLD.rowid <= (SELECT indexed_through FROM text_index_state WHERE id = 1);
            UPDATE text_index_state SET indexed_through = (
                SELECT coalesce(max(rowid), 0) FROM events
            ) WHERE id = 1 AND indexed_through > (SELECT coalesce(max(rowid), 0) FROM events);
        END""",
        "DROP INDEX sessions_top_by_activity",
        "DROP INDEX sessions_top_kind_by_activity",
    ),
)
