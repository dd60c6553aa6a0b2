//! The worker pipe protocol: any header decodes or is refused without a
//! panic, error bodies always yield a type and a message, and every frame
//! `encode` accepts decodes back to its own header.
#![no_main]

use kruntimes_proto::runtime::worker::{self, HEADER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() >= HEADER {
        let mut h = [0u8; HEADER];
        h.copy_from_slice(&data[..HEADER]);
        if let Ok(header) = worker::header(&h) {
            let _ = worker::answers(&header, header.seq);
        }
        let (kind, message) = worker::error_of(&data[HEADER..]);
        let _ = (kind.len(), message.len());
    }
    if let Some((&tag, rest)) = data.split_first() {
        let seq = rest
            .iter()
            .take(8)
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        if let Ok(frame) = worker::encode(tag, seq, rest) {
            let mut h = [0u8; HEADER];
            h.copy_from_slice(&frame[..HEADER]);
            let header = worker::header(&h).expect("an encoded frame decodes");
            assert_eq!((header.tag, header.seq, header.payload), (tag, seq, rest.len()));
        }
    }
});
