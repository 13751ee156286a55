-- The W3C trace context of what starts a run (`docs/observability.md`), by id: a chat's
-- (`parent`: the request that started its current run; `run`: that run's own span, which a
-- daemon taking the chat over links to) or a queued message's (`parent` only, until it
-- runs). Kept apart from the chat row, which every transition rewrites.
CREATE TABLE trace_contexts (
    id     TEXT PRIMARY KEY,
    parent TEXT,
    run    TEXT
);
