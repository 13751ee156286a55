-- Why the model stopped at the step an assistant message holds (e.g. `pause_turn`, a
-- turn the provider paused that the next step carries on). NULL on messages that are not
-- a step's assistant output and on those stored before it was recorded.
ALTER TABLE messages ADD COLUMN finish_reason TEXT;
