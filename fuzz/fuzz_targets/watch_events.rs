//! Ownership watch events as a gateway receives them: any byte stream,
//! decoded as length-delimited `WatchEvent`s, framed and applied to the
//! routing table, then looked up — never a panic.
#![no_main]

use std::time::{Duration, Instant};

use kruntimes_gateway::table::Table;
use kruntimes_proto::ownership::v1::WatchEvent;
use kruntimes_proto::watch::Framer;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    let mut framer = Framer::default();
    let mut table = Table::new(Duration::from_secs(30));
    let now = Instant::now();
    let mut uids = Vec::new();
    while !buf.is_empty() {
        let Ok(ev) = WatchEvent::decode_length_delimited(&mut buf) else {
            break;
        };
        match framer.push(ev) {
            Ok(Some(update)) => {
                if let kruntimes_proto::watch::SourceUpdate::Upsert(e) = &update {
                    uids.push((e.namespace.clone(), e.runtime.clone(), e.run_uid.clone()));
                }
                table.apply_control_plane(update.clone(), now);
                table.apply_runtimed("127.0.0.1:7443", update, now);
            }
            Ok(None) => {}
            Err(_) => framer = Framer::default(),
        }
    }
    for (ns, rt, uid) in &uids {
        let _ = table.route(ns, rt, uid, now);
        let _ = table.run_name(ns, rt, uid);
    }
    let _ = table.len();
});
