//! `[telemetry]` and the standard OpenTelemetry variables: whether traces are exported, where
//! to and how. [`resolve`] is the one decision, a pure function of the table and the
//! environment; a value it cannot use stops start-up naming the key or the variable.
//!
//! Precedence, key by key: the file, then the environment, then the default.
//!
//! | setting | file | environment | default |
//! | --- | --- | --- | --- |
//! | on or off | `enabled`; else on when the table names an `endpoint` | on with `OTEL_TRACES_EXPORTER=otlp` or an endpoint variable; off with `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true` | off |
//! | endpoint | `endpoint` (a base URL) | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL) | `http://localhost:4318`, gRPC `http://localhost:4317` |
//! | protocol | `protocol` | `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | `http/protobuf` |
//! | service name | `service_name` | `OTEL_SERVICE_NAME` | `keel` |
//! | content in spans | `capture_content` | `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` | `false` |
//!
//! Over HTTP a base URL gets the traces path, `/v1/traces`, as the OTLP exporters do.

use serde::{Deserialize, Serialize};

use super::{ConfigError, Env};

/// `[telemetry]` as written: every key optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryFile {
    pub enabled: Option<bool>,
    pub endpoint: Option<String>,
    pub protocol: Option<Protocol>,
    pub service_name: Option<String>,
    pub capture_content: Option<bool>,
    pub sample_ratio: Option<f64>,
}

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl Protocol {
    fn parse(value: &str) -> Option<Self> {
        [Protocol::Grpc, Protocol::HttpProtobuf]
            .into_iter()
            .find(|protocol| protocol.as_str() == value.trim())
    }

    pub fn as_str(self) -> &'static str {
        keel_core::names::serde_name(&self)
    }
}

/// Traces as the daemon exports them.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// The URL spans are sent to: over HTTP the traces URL itself.
    pub endpoint: String,
    pub protocol: Protocol,
    pub service_name: String,
    /// Prompts, replies, tool arguments and results are recorded in spans.
    pub capture_content: bool,
    /// The share of new traces sampled; a run whose request was sampled is always kept.
    pub sample_ratio: f64,
}

/// Whether traces are exported and how: `None` when telemetry is off.
pub fn resolve(file: &TelemetryFile, env: &dyn Env) -> Result<Option<Telemetry>, ConfigError> {
    let exporter = env.var("OTEL_TRACES_EXPORTER");
    let env_on = match exporter.as_deref().map(str::trim) {
        Some("otlp") => Some(true),
        Some("none") => Some(false),
        Some(other) => {
            return Err(ConfigError::invalid(
                "OTEL_TRACES_EXPORTER",
                format!("`{other}` is not an exporter Keel has: `otlp` or `none`"),
            ));
        }
        None => None,
    };
    let traces_endpoint = env.var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let base_endpoint = env.var("OTEL_EXPORTER_OTLP_ENDPOINT");
    let disabled = env
        .var("OTEL_SDK_DISABLED")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let on = match (file.enabled, &file.endpoint) {
        (Some(enabled), _) => enabled,
        (None, Some(_)) => true,
        (None, None) => {
            !disabled && env_on.unwrap_or(traces_endpoint.is_some() || base_endpoint.is_some())
        }
    };
    if !on {
        return Ok(None);
    }

    let protocol = match file.protocol {
        Some(protocol) => protocol,
        None => env_protocol(env)?.unwrap_or(Protocol::HttpProtobuf),
    };
    let endpoint = match (&file.endpoint, traces_endpoint, base_endpoint) {
        (Some(base), _, _) => signal_url(base, protocol),
        (None, Some(url), _) => url,
        (None, None, Some(base)) => signal_url(&base, protocol),
        (None, None, None) => match protocol {
            Protocol::Grpc => "http://localhost:4317".to_owned(),
            Protocol::HttpProtobuf => "http://localhost:4318/v1/traces".to_owned(),
        },
    };
    check_url(&endpoint, file.endpoint.is_some())?;
    let service_name = file
        .service_name
        .clone()
        .or_else(|| env.var("OTEL_SERVICE_NAME"))
        .unwrap_or_else(|| "keel".to_owned());
    if service_name.trim().is_empty() {
        return Err(ConfigError::invalid(
            "telemetry.service_name",
            "must not be empty",
        ));
    }
    let capture_content = match file.capture_content {
        Some(capture) => capture,
        None => match env.var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") {
            Some(value) => parse_bool(&value).ok_or_else(|| {
                ConfigError::invalid(
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                    format!("`{value}` is not `true` or `false`"),
                )
            })?,
            None => false,
        },
    };
    let sample_ratio = file.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        return Err(ConfigError::invalid(
            "telemetry.sample_ratio",
            "must be between 0 and 1",
        ));
    }
    Ok(Some(Telemetry {
        endpoint,
        protocol,
        service_name,
        capture_content,
        sample_ratio,
    }))
}

/// The protocol the environment names, the traces' own variable first.
fn env_protocol(env: &dyn Env) -> Result<Option<Protocol>, ConfigError> {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = env.var(var) {
            return Protocol::parse(&value).map(Some).ok_or_else(|| {
                ConfigError::invalid(
                    var,
                    format!(
                        "`{value}` is not a protocol Keel exports with: `grpc` or `http/protobuf`"
                    ),
                )
            });
        }
    }
    Ok(None)
}

/// A base URL as the traces URL of `protocol`: over HTTP with `/v1/traces` appended.
fn signal_url(base: &str, protocol: Protocol) -> String {
    match protocol {
        Protocol::Grpc => base.to_owned(),
        Protocol::HttpProtobuf if base.trim_end_matches('/').ends_with("/v1/traces") => {
            base.to_owned()
        }
        Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
    }
}

fn check_url(url: &str, from_file: bool) -> Result<(), ConfigError> {
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .map(|rest| rest.split(['/', '?']).next().unwrap_or_default());
    if host.is_some_and(|h| !h.is_empty()) {
        return Ok(());
    }
    let key = if from_file {
        "telemetry.endpoint"
    } else {
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    };
    Err(ConfigError::invalid(
        key,
        format!("`{url}` is not an http:// or https:// URL"),
    ))
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::env;

    fn file(text: &str) -> TelemetryFile {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn telemetry_is_off_unless_the_file_or_the_environment_turns_it_on() {
        assert_eq!(resolve(&file(""), &env(&[])).unwrap(), None);
        let on = resolve(&file(""), &env(&[("OTEL_TRACES_EXPORTER", "otlp")]))
            .unwrap()
            .unwrap();
        assert_eq!(on.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(on.protocol, Protocol::HttpProtobuf);
        assert_eq!(on.service_name, "keel");
        assert!(!on.capture_content);
        let by_endpoint = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]);
        let on = resolve(&file(""), &by_endpoint).unwrap().unwrap();
        assert_eq!(on.endpoint, "http://collector:4318/v1/traces");
        let none = env(&[
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ]);
        assert_eq!(resolve(&file(""), &none).unwrap(), None);
        let sdk_off = env(&[
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
        ]);
        assert_eq!(resolve(&file(""), &sdk_off).unwrap(), None);
    }

    #[test]
    fn the_file_beats_the_environment_key_by_key() {
        let e = env(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "from-env"),
        ]);
        let from_env = resolve(&file(""), &e).unwrap().unwrap();
        assert_eq!(
            (from_env.endpoint.as_str(), from_env.protocol),
            ("http://env:4317", Protocol::Grpc)
        );
        assert_eq!(from_env.service_name, "from-env");
        let ours = file(
            "endpoint = \"http://file:4318\"\nprotocol = \"http/protobuf\"\n\
             service_name = \"keel-eu\"\ncapture_content = true",
        );
        let from_file = resolve(&ours, &e).unwrap().unwrap();
        assert_eq!(from_file.endpoint, "http://file:4318/v1/traces");
        assert_eq!(from_file.protocol, Protocol::HttpProtobuf);
        assert_eq!(from_file.service_name, "keel-eu");
        assert!(from_file.capture_content);
        assert_eq!(resolve(&file("enabled = false"), &e).unwrap(), None);
        // The traces' own variable is a whole URL and beats the base.
        let traces = env(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
        ]);
        let on = resolve(&file(""), &traces).unwrap().unwrap();
        assert_eq!(on.endpoint, "http://t:9/custom");
    }

    #[test]
    fn a_table_with_an_endpoint_turns_telemetry_on() {
        let on = resolve(
            &file("endpoint = \"http://127.0.0.1:4317\"\nprotocol = \"grpc\""),
            &env(&[]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(on.endpoint, "http://127.0.0.1:4317");
        assert_eq!(
            resolve(&file("capture_content = true"), &env(&[])).unwrap(),
            None
        );
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        type Vars = &'static [(&'static str, &'static str)];
        let cases: [(&str, Vars, &str); 5] = [
            (
                "",
                &[("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER",
            ),
            (
                "",
                &[
                    ("OTEL_TRACES_EXPORTER", "otlp"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            ("endpoint = \"collector:4317\"", &[], "telemetry.endpoint"),
            (
                "enabled = true\nsample_ratio = 1.5",
                &[],
                "telemetry.sample_ratio",
            ),
            (
                "enabled = true\nservice_name = \" \"",
                &[],
                "telemetry.service_name",
            ),
        ];
        for (text, vars, key) in cases {
            let error = resolve(&file(text), &env(vars)).unwrap_err().to_string();
            assert!(error.contains(key), "{text} {vars:?}: {error}");
        }
        let error = toml::from_str::<TelemetryFile>("protocol = \"http/json\"").unwrap_err();
        assert!(error.to_string().contains("http/protobuf"), "{error}");
    }
}
