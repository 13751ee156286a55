-- Messages form a tree: an edit or a regenerate starts a sibling branch and the old one stays
-- stored. `parent_id` links a message to the one before it (NULL for a chat's first);
-- `on_branch` marks the messages of the chat's current branch, the path from its first
-- message to `chats.leaf_id`, which is all that is listed and sent to the model.
-- `chats.branch_seq` is the event sequence of the last change of the current branch.
-- Rows an edit soft-deleted before branches existed stay out of the tree (`deleted`).
ALTER TABLE messages ADD COLUMN parent_id BIGINT;
ALTER TABLE messages ADD COLUMN on_branch BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE chats ADD COLUMN leaf_id BIGINT NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN branch_seq BIGINT NOT NULL DEFAULT 0;
-- Existing chats become a single chain: every live message follows the one before it.
UPDATE messages SET on_branch = FALSE WHERE deleted;
UPDATE messages SET parent_id = (
    SELECT MAX(p.id) FROM messages p
    WHERE p.chat_id = messages.chat_id AND p.id < messages.id AND NOT p.deleted
) WHERE NOT deleted;
UPDATE chats SET leaf_id = COALESCE(
    (SELECT MAX(m.id) FROM messages m WHERE m.chat_id = chats.id AND NOT m.deleted), 0);
CREATE INDEX messages_parent ON messages (chat_id, parent_id);
