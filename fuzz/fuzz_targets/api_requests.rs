//! Requests to every API endpoint through the real router: no input is a server error.
#![no_main]

use keel_fuzz::api::{ApiInput, exercise};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: ApiInput| exercise(&input));
