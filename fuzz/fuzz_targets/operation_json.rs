//! Session operation bodies (`operations:execute`) and invoke payload
//! checks on any bytes: decoding and validation never panic.
#![no_main]

use kruntimes_runtimed::session::{http, ops};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = serde_json::from_slice::<ops::OperationRequest>(data) {
        let _ = http::operation(req);
    }
    let _ = serde_json::from_slice::<serde_json::Value>(data);
});
