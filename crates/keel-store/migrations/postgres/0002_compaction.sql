-- Context compaction: a summary boundary and a visible notice are messages of their own
-- kind; a requested compaction is a flag on the runnable chat.
ALTER TABLE messages ADD COLUMN kind TEXT NOT NULL DEFAULT 'normal';
ALTER TABLE chats ADD COLUMN compact_requested BOOLEAN NOT NULL DEFAULT FALSE;
