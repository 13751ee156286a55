-- Where a failed run's error came from: the provider's configured name and the address the
-- request went to (without its query or credentials), so a client can say which endpoint
-- failed. NULL for errors that did not come from a provider request.
ALTER TABLE chats ADD COLUMN last_error_provider TEXT;
ALTER TABLE chats ADD COLUMN last_error_url TEXT;
