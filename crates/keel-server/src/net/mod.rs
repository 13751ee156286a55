//! The daemon's network edge: who may talk to it and how much of it anyone may take.
//!
//! * [`hosts`] — the `Host`/`Origin`/`Sec-Fetch-Site` decision (DNS rebinding and
//!   cross-site requests), a pure function;
//! * [`guard`] — the middleware applying it to every route, web page and live events included;
//! * [`request_id`] — an id for every request, in the `x-request-id` header, in error bodies
//!   and in the log lines of internal errors;
//! * [`sse_slots`] — the caps on live event streams per user and in all;
//! * [`server`] — the HTTP server: header-read timeout and the limit on requests in flight.

pub(crate) mod guard;
pub(crate) mod hosts;
pub(crate) mod request_id;
pub(crate) mod served;
pub(crate) mod server;
pub(crate) mod sse_slots;
