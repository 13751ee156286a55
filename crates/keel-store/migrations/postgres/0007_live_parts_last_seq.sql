-- Every read of the live-part log asks for the batches ending after a client's position
-- (`last_seq > $after`). Keyed by `(chat_id, first_seq)` alone, such a read visited every
-- batch of the chat's step so far, so a follower's read grew with the reply's length;
-- with this index it touches only the batches it returns.
CREATE UNIQUE INDEX live_parts_chat_last_seq ON live_parts (chat_id, last_seq);
