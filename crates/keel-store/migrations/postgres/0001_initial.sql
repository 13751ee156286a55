-- Keel's schema. Timestamps are milliseconds since the Unix epoch, JSON is stored as text,
-- so both backends share one row format.

CREATE TABLE chats (
    id                 TEXT PRIMARY KEY,
    owner              TEXT NOT NULL,
    title              TEXT,
    model              TEXT NOT NULL,
    status             TEXT NOT NULL,
    archived           BOOLEAN NOT NULL DEFAULT FALSE,
    max_steps          BIGINT,
    system_prompt      TEXT,
    tools              TEXT NOT NULL DEFAULT 'null',
    worker_id          TEXT,
    lease_expires_at   BIGINT,
    version            BIGINT NOT NULL,
    history_version    BIGINT NOT NULL,
    event_seq          BIGINT NOT NULL,
    last_message_id    BIGINT NOT NULL,
    last_error_kind    TEXT,
    last_error_message TEXT,
    retry_state        TEXT,
    pending_tool_calls TEXT NOT NULL DEFAULT '[]',
    pending_deadline   BIGINT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);
CREATE INDEX chats_owner_created ON chats (owner, created_at DESC, id DESC);
CREATE INDEX chats_created ON chats (created_at DESC, id DESC);
CREATE INDEX chats_runnable ON chats (updated_at) WHERE status IN ('running', 'interrupting');
CREATE INDEX chats_leased ON chats (lease_expires_at) WHERE worker_id IS NOT NULL;
CREATE INDEX chats_pending ON chats (pending_deadline) WHERE status = 'requires_action';

CREATE TABLE messages (
    chat_id              TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    id                   BIGINT NOT NULL,
    role                 TEXT NOT NULL,
    parts                TEXT NOT NULL,
    content_version      BIGINT NOT NULL,
    usage                TEXT,
    context_limit        BIGINT,
    runtime_ms           BIGINT,
    interrupted          BOOLEAN NOT NULL,
    provider_response_id TEXT,
    deleted              BOOLEAN NOT NULL DEFAULT FALSE,
    event_seq            BIGINT NOT NULL,
    created_at           BIGINT NOT NULL,
    PRIMARY KEY (chat_id, id)
);
CREATE INDEX messages_seq ON messages (chat_id, event_seq);

CREATE TABLE queued_messages (
    id         TEXT PRIMARY KEY,
    chat_id    TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    position   BIGINT NOT NULL,
    parts      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX queued_messages_chat ON queued_messages (chat_id, position);

-- The live-part log of the step in progress, one row per appended batch: entry i of a
-- row has sequence number first_seq + i. Committing the step deletes the chat's rows.
CREATE TABLE live_parts (
    chat_id   TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    first_seq BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    payloads  TEXT NOT NULL,
    PRIMARY KEY (chat_id, first_seq)
);

CREATE TABLE tool_records (
    chat_id      TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    tool_call_id TEXT NOT NULL,
    tool_name    TEXT NOT NULL,
    args         TEXT NOT NULL,
    state        TEXT NOT NULL,
    result       TEXT,
    is_error     BOOLEAN NOT NULL DEFAULT FALSE,
    started_at   BIGINT NOT NULL,
    finished_at  BIGINT,
    PRIMARY KEY (chat_id, tool_call_id)
);

CREATE TABLE checkpoints (
    chat_id    TEXT PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    data       TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE users (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL
);

CREATE TABLE idempotency_keys (
    user_name  TEXT NOT NULL,
    idem_key   TEXT NOT NULL,
    response   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_name, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
