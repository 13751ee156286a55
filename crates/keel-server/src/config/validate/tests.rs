use crate::config::ConfigError;
use crate::config::testing::{env, resolve};

/// A valid user entry, to which a case adds a key.
const USER: &str = "[[users]]\nname = \"a\"\ntoken_sha256 = \"\
        9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n";

#[test]
fn bad_values_name_their_key() {
    let cases: [(&str, &str); _] = [
        ("[runs]\nworkers = 0", "runs.workers"),
        (
            "[runs]\ndatabase_connections = 1",
            "runs.database_connections",
        ),
        (
            "[runs]\ncompaction_threshold = 1.5",
            "runs.compaction_threshold",
        ),
        ("listen = \"nowhere\"", "listen"),
        ("database = \"mysql://x\"", "database"),
        (
            "[tools]\nbuiltin = [\"list_dir\", \"list_dir\"]",
            "tools.builtin[1]",
        ),
        ("[tools]\ntimeout_ms = 0", "tools.timeout_ms"),
        (
            "[[mcp_servers]]\nname = \"x\"\ncommand = \"y\"\ntimeout_ms = 0",
            "mcp_servers[0].timeout_ms",
        ),
        (
            "[[mcp_servers]]\nname = \"x\"\nurl = \"http://h/\"\nenv_passthrough = [\"A\"]",
            "mcp_servers[0].env_passthrough",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"openai-responses\"\nbase_url = \"http://h\"\ncontinuation = \"prefill\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
            "providers[0].continuation",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"gemini\"\nbase_url = \"http://h\"\ncontinuation = \"prefill\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
            "providers[0].continuation",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"gemini\"\nbase_url = \"http://h\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\ncontinuation = \"prefill\"",
            "models[0].continuation",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\nbase_url = \"http://h\"\noutput_limit_field = \"max_tokens\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
            "providers[0].output_limit_field",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"openai-responses\"\nbase_url = \"http://h\"\nreasoning_content = \"send\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
            "providers[0].reasoning_content",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"openai-responses\"\nbase_url = \"http://h\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\ncontinuation = \"prefill\"",
            "models[0].continuation",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\nbase_url = \"http://h\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\nthinking = \"adaptive\"\nthinking_budget_tokens = 1024",
            "models[0].thinking",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"http://h\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\neffort = \"high\"",
            "models[0].effort",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\napi_key_env = \"MISSING_KEY\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"",
            "providers[0].api_key_env",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\n[[models]]\nid = \"m\"\nprovider = \"q\"\nmodel = \"m\"",
            "models[0].provider",
        ),
        ("[[mcp_servers]]\nname = \"x\"", "mcp_servers[0].command"),
        (
            "[server]\nallowed_hosts = [\"http://proxy.example\"]",
            "server.allowed_hosts[0]",
        ),
        ("[server]\nsse_max_total = 0", "server.sse_max_total"),
        (
            "[server]\nheader_read_timeout_ms = 0",
            "server.header_read_timeout_ms",
        ),
        (
            "[server]\nsse_write_interval_ms = 251",
            "server.sse_write_interval_ms",
        ),
        (
            "[[users]]\nname = \"a\"\ntoken_sha256 = \"zz\"",
            "users[0].token_sha256",
        ),
        (
            &format!("{USER}budget = {{ per = \"day\" }}"),
            "users[0].budget",
        ),
        (
            &format!("{USER}budget = {{ cost = -1.0, per = \"month\" }}"),
            "users[0].budget",
        ),
        (
            "[[providers]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"http://h\"\n[[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\nprice = { input = 1.0, output = -2.0 }",
            "models[0].price.output",
        ),
    ];
    for (text, key) in cases {
        match resolve(text, &env(&[])) {
            Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{text}"),
            other => panic!("{text}: expected an error naming {key}, got {other:?}"),
        }
    }
}

#[test]
fn provider_tools_must_be_ones_the_models_provider_runs() {
    let config = |kind: &str, tools: &str| {
        format!(
            "[[providers]]\nname = \"p\"\nkind = \"{kind}\"\nbase_url = \"http://h\"\n\
                 [[models]]\nid = \"m\"\nprovider = \"p\"\nmodel = \"m\"\n\
                 provider_tools = {tools}"
        )
    };
    for (kind, tools, why) in [
        (
            "anthropic",
            "[\"code_interpreter\"]",
            "unknown provider tool",
        ),
        (
            "openai-chat",
            "[\"web_search\"]",
            "openai-chat providers have no",
        ),
        (
            "anthropic",
            "[\"web_search\", \"web_search\"]",
            "listed twice",
        ),
    ] {
        match resolve(&config(kind, tools), &env(&[])) {
            Err(ConfigError::Invalid { key, message }) => {
                assert_eq!(key, "models[0].provider_tools");
                assert!(message.contains(why), "{message}");
            }
            other => panic!("{kind} {tools}: expected an error, got {other:?}"),
        }
    }
    for kind in ["anthropic", "openai-responses"] {
        let resolved = resolve(&config(kind, "[\"web_search\"]"), &env(&[])).unwrap();
        assert_eq!(resolved.models[0].provider_tools, ["web_search"]);
    }
}
