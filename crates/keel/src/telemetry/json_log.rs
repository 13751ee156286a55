//! A log line as one JSON object (`[log] format = "json"`): time, level, target, message and
//! the event's fields, and at the top level the ids a log collector joins on, taken from the
//! spans the event happened in: `request_id` (the HTTP request), `chat_id` and `trace_id`
//! (the request's `traceparent`, or the run's trace).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The ids lifted from the enclosing spans to the top of a line, innermost span first.
const IDS: &[&str] = &["request_id", "chat_id", "trace_id"];

/// The event format of JSON lines; span fields must be formatted by [`JsonFields`].
pub(super) struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .into(),
        );
        line.insert("level".into(), metadata.level().as_str().into());
        line.insert("target".into(), metadata.target().into());
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let mut spans = Vec::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope {
                let extensions = span.extensions();
                let recorded = extensions
                    .get::<FormattedFields<JsonFields>>()
                    .and_then(|f| serde_json::from_str::<Map<String, Value>>(f).ok())
                    .unwrap_or_default();
                spans.push((span.name(), recorded));
            }
        }
        line.extend(lifted_ids(&fields.0, &spans));
        if let Some((name, _)) = spans.first() {
            line.insert("span".into(), (*name).into());
        }
        for (key, value) in fields.0 {
            line.entry(key).or_insert(value);
        }
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// The ids of a line: the event's own field of that name, else the innermost span's.
/// `spans` runs from the innermost span out.
fn lifted_ids(
    event: &Map<String, Value>,
    spans: &[(&str, Map<String, Value>)],
) -> Map<String, Value> {
    let mut ids = Map::new();
    for key in IDS {
        let found = event
            .get(*key)
            .or_else(|| spans.iter().find_map(|(_, fields)| fields.get(*key)));
        if let Some(value) = found.filter(|v| !v.is_null()) {
            ids.insert((*key).to_owned(), value.clone());
        }
    }
    ids
}

/// An event's fields as JSON values.
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn ids_come_from_the_event_then_the_innermost_span() {
        let spans = vec![
            (
                "run",
                map(json!({"chat_id": "c-inner", "trace_id": "t-run"})),
            ),
            (
                "request",
                map(json!({"request_id": "r-1", "chat_id": "c-outer"})),
            ),
        ];
        let ids = lifted_ids(&map(json!({"trace_id": "t-event"})), &spans);
        assert_eq!(
            Value::Object(ids),
            json!({"request_id": "r-1", "chat_id": "c-inner", "trace_id": "t-event"})
        );
        assert!(lifted_ids(&Map::new(), &[]).is_empty());
    }
}
