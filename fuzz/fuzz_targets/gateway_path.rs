//! The gateway's route parser and the API path parser on any path: never a
//! panic; a parsed Run route names a valid Run UID and a DNS-label
//! namespace.
#![no_main]

use kruntimes_gateway::admission::run_target::RunTarget;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = RunTarget::parse(path) {
        assert!(kruntimes_proto::api::valid_run_uid(&t.uid), "{path:?}");
        assert!(kruntimes_proto::api::dns_label(&t.namespace), "{path:?}");
    }
    let _ = kruntimes_proto::api::parse_path(path);
});
