-- What every committed step consumed, with its cost at the price in force when it was
-- recorded. Kept apart from messages (and without a foreign key to chats) so a user's
-- spending outlives a deleted chat: a budget cannot be reset by deleting what spent it.
CREATE TABLE usage_records (
    chat_id             TEXT NOT NULL,
    message_id          BIGINT NOT NULL,
    user_name           TEXT NOT NULL,
    model               TEXT NOT NULL,
    recorded_at         BIGINT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    reasoning_tokens    BIGINT NOT NULL,
    cost_nanos          BIGINT,
    PRIMARY KEY (chat_id, message_id)
);
CREATE INDEX usage_records_user_time ON usage_records (user_name, recorded_at);
-- A user's spending limit as JSON (`{"tokens": N, "per": "day"}`), or none.
ALTER TABLE users ADD COLUMN budget TEXT;
