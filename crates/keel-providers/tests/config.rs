//! Building models from settings.

use keel_core::CallOptions;
use keel_providers::{ProviderBuildError, ProviderKind, ProviderSettings, build_model};

/// A plain HTTP client on the process's rustls crypto provider, which the `keel` binary
/// installs in `main`; reqwest needs one to build any client.
fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[test]
fn provider_kinds_use_the_config_spelling() {
    for (kind, text) in [
        (ProviderKind::OpenAiChat, "openai-chat"),
        (ProviderKind::OpenAiResponses, "openai-responses"),
        (ProviderKind::Anthropic, "anthropic"),
    ] {
        assert_eq!(serde_json::to_value(kind).unwrap(), text);
        assert_eq!(
            serde_json::from_value::<ProviderKind>(text.into()).unwrap(),
            kind
        );
        assert_eq!(kind.to_string(), text);
    }
    assert!(serde_json::from_value::<ProviderKind>("openai".into()).is_err());
}

#[test]
fn settings_deserialise_with_defaults() {
    let settings: ProviderSettings = serde_json::from_str(
        r#"{"name":"local","kind":"openai-chat","base_url":"http://127.0.0.1:8080/v1"}"#,
    )
    .unwrap();
    assert!(settings.include_usage);
    assert!(settings.api_key.is_none());
    assert!(settings.extra_headers.is_empty());
    assert_eq!(settings.base_url(), "http://127.0.0.1:8080/v1");
    assert_eq!(
        ProviderSettings::new("a", ProviderKind::Anthropic).base_url(),
        "https://api.anthropic.com"
    );
    assert_eq!(
        ProviderSettings::new("o", ProviderKind::OpenAiResponses).base_url(),
        "https://api.openai.com/v1"
    );
}

#[test]
fn the_api_key_never_shows_in_debug_output() {
    let mut settings = ProviderSettings::new("o", ProviderKind::OpenAiChat);
    settings.api_key = Some("sk-very-secret".into());
    assert!(!format!("{settings:?}").contains("sk-very-secret"));
}

#[test]
fn builds_every_kind() {
    for kind in [
        ProviderKind::OpenAiChat,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
    ] {
        let mut settings = ProviderSettings::new("p", kind);
        settings.api_key = Some("key".into());
        let model = build_model(&settings, "upstream", client()).unwrap();
        assert_eq!(model.provider(), "p");
        assert_eq!(model.model(), "upstream");
        let options = CallOptions::default();
        assert_eq!(
            model.supports_prefill(&options),
            kind == ProviderKind::Anthropic
        );
    }
}

#[test]
fn a_claude_4_6_model_continues_by_instruction_and_an_older_one_learns_to() {
    let mut settings = ProviderSettings::new("p", ProviderKind::Anthropic);
    settings.api_key = Some("key".into());
    let options = CallOptions::default();
    let current = build_model(&settings, "claude-sonnet-4-6", client()).unwrap();
    assert!(!current.supports_prefill(&options));
    assert!(!current.refuse_prefill(), "nothing to learn");
    let older = build_model(&settings, "claude-sonnet-4-5", client()).unwrap();
    assert!(older.supports_prefill(&options));
    assert!(older.refuse_prefill(), "the first refusal switches it");
    assert!(!older.supports_prefill(&options));
    assert!(!older.refuse_prefill(), "and only the first");
}

#[test]
fn bad_settings_are_named() {
    let client = client();
    let official = ProviderSettings::new("openai", ProviderKind::OpenAiChat);
    assert!(matches!(
        build_model(&official, "m", client.clone()),
        Err(ProviderBuildError::MissingApiKey { .. })
    ));

    let mut bad_url = ProviderSettings::new("x", ProviderKind::OpenAiChat);
    bad_url.base_url = Some("not a url".into());
    let err = build_model(&bad_url, "m", client.clone()).err().unwrap();
    assert!(matches!(err, ProviderBuildError::InvalidBaseUrl { .. }));
    assert!(err.to_string().contains("not a url"));

    let mut ftp = ProviderSettings::new("x", ProviderKind::Anthropic);
    ftp.base_url = Some("ftp://example.com".into());
    assert!(matches!(
        build_model(&ftp, "m", client.clone()),
        Err(ProviderBuildError::InvalidBaseUrl { .. })
    ));

    let mut header = ProviderSettings::new("x", ProviderKind::OpenAiChat);
    header.base_url = Some("http://127.0.0.1:1/v1".into());
    header.extra_headers.insert("bad header".into(), "v".into());
    let err = build_model(&header, "m", client.clone()).err().unwrap();
    assert_eq!(
        err,
        ProviderBuildError::InvalidHeader {
            provider: "x".into(),
            header: "bad header".into()
        }
    );

    let mut key = ProviderSettings::new("x", ProviderKind::Anthropic);
    key.api_key = Some("line\nbreak".into());
    assert!(matches!(
        build_model(&key, "m", client),
        Err(ProviderBuildError::InvalidApiKey { .. })
    ));
}

#[test]
fn providers_from_the_usual_environment_variables() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert!(ProviderSettings::from_env(env(&[])).is_empty());
    assert!(ProviderSettings::from_env(env(&[("OPENAI_API_KEY", " ")])).is_empty());

    let found = ProviderSettings::from_env(env(&[
        ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
        ("ANTHROPIC_API_KEY", "sk-ant"),
    ]));
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].name, "openai");
    assert_eq!(found[0].kind, ProviderKind::OpenAiChat);
    assert_eq!(
        found[0].base_url.as_deref(),
        Some("http://127.0.0.1:8080/v1")
    );
    assert!(found[0].api_key.is_none());
    assert_eq!(found[1].name, "anthropic");
    assert_eq!(found[1].api_key.as_deref(), Some("sk-ant"));
    assert_eq!(found[1].base_url(), "https://api.anthropic.com");
}

#[test]
fn the_default_http_client_builds_models() {
    install_crypto_provider();
    let client = keel_providers::http_client().unwrap();
    let mut settings = ProviderSettings::new("a", ProviderKind::Anthropic);
    settings.api_key = Some("k".into());
    assert!(build_model(&settings, "m", client).is_ok());
}
