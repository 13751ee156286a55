//! Config file text through parsing and validation: any text is a config or an error.
#![no_main]

use std::path::Path;

use keel_server::config::{Config, Env, FileConfig, Overrides};
use libfuzzer_sys::fuzz_target;

/// Some variables set, so `api_key_env` and the provider shortcuts take both branches.
struct SomeEnv;

impl Env for SomeEnv {
    fn var(&self, name: &str) -> Option<String> {
        (name.len() % 2 == 0).then(|| format!("value-of-{name}"))
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = FileConfig::parse(text, Path::new("fuzz.toml")) {
        let _ = Config::resolve(file, None, &Overrides::default(), &SomeEnv);
    }
});
