-- The live-part log's rows no longer check their chat with a foreign key. The log writer
-- inserts a row per streaming chat every window (twenty thousand rows a second at a
-- thousand chats), and each row's check ran a query of its own on `chats` at the end of
-- the statement, taking a share lock on a row the writer already holds for update: a
-- tenth of the server's time under that load. Every insert is fenced on the chat's row,
-- locked in the same transaction, so a row of a deleted chat cannot be written; deleting
-- a chat deletes its log rows itself.
ALTER TABLE live_parts DROP CONSTRAINT live_parts_chat_id_fkey;
