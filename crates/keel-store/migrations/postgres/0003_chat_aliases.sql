-- Names a client chose for a chat (the AI SDK's chat id), per owner. A name keeps the first
-- chat it was given; it goes with its chat.
CREATE TABLE chat_aliases (
    owner      TEXT NOT NULL,
    alias      TEXT NOT NULL,
    chat_id    TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (owner, alias)
);
CREATE INDEX chat_aliases_chat ON chat_aliases (chat_id);
