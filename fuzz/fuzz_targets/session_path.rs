//! The workspace-path rule shared by runtimed and the Runtime Server: an
//! accepted path is relative and has no `..`, root or prefix component.
#![no_main]

use std::path::Component;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(rel) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = kruntimes_proto::runtime::path::normalize(rel) {
        assert!(p.is_relative(), "{rel:?} -> {p:?}");
        assert!(
            p.components().all(|c| matches!(c, Component::Normal(_))),
            "{rel:?} -> {p:?}"
        );
    }
});
