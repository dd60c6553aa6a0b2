//! The gateway's reader of client WebSocket frames on any bytes, split at
//! any points: never a panic, every event's offset inside its chunk, and
//! nothing after a malformed frame.
#![no_main]

use kruntimes_gateway::proxy::websocket::{Event, FrameReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(split).max(1);
    let mut reader = FrameReader::new(4096);
    let mut broken = false;
    for chunk in rest.chunks(step) {
        for ev in reader.feed(chunk) {
            assert!(!broken, "an event after a malformed frame");
            let offset = match ev {
                Event::MessageStart { offset } | Event::TooBig { offset } => offset,
                Event::Malformed { offset } => {
                    broken = true;
                    offset
                }
            };
            assert!(offset < chunk.len(), "offset {offset} in a chunk of {}", chunk.len());
        }
    }
});
