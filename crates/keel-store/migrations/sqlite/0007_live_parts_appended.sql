-- The live-part log as an ordinary table with its key in an index. Keyed by the chat's id
-- alone (WITHOUT ROWID), every batch of a write that logs many chats at once landed on its
-- own page of the table, carrying its whole payload; now the batches are appended at the
-- table's end and only the small index entries are scattered. The index ends in `last_seq`,
-- which every read of the log seeks by (the batches ending after a client's position):
-- a client that is up to date touches no batch at all.
CREATE TABLE live_parts_appended (
    chat_id   TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    payloads  TEXT NOT NULL
);
INSERT INTO live_parts_appended (chat_id, first_seq, last_seq, payloads)
    SELECT chat_id, first_seq, last_seq, payloads FROM live_parts;
DROP TABLE live_parts;
ALTER TABLE live_parts_appended RENAME TO live_parts;
CREATE UNIQUE INDEX live_parts_chat_last_seq ON live_parts (chat_id, last_seq);
