//! The client → owner half of a session WebSocket, read frame by frame
//! (RFC 6455 §5.2) as it passes through the gateway — headers only, never
//! the payload: each new data message is one operation, authorized again
//! through the decision cache and checked against the token's expiry, and
//! each message is held to the body limit on its own, not cumulatively.
//!
//! A message that may not pass is replaced by a masked Close frame to the
//! owner, whose WebSocket answers it with the same code and reason to the
//! client, so the client reads why its socket ended; the gateway forwards
//! nothing of the client's after it.

/// Close codes the gateway ends a session WebSocket with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The caller's token expired (4401).
    TokenExpired,
    /// The caller is no longer authenticated (4401).
    Unauthenticated,
    /// The caller may no longer use the session (4403).
    Forbidden,
    /// Authorization could not be decided (1013, try again later).
    Unavailable,
    /// A message over the body limit (1009).
    TooBig,
    /// Not a WebSocket frame stream (1002).
    Protocol,
}

impl CloseReason {
    /// The close code.
    pub fn code(self) -> u16 {
        match self {
            Self::TokenExpired | Self::Unauthenticated => 4401,
            Self::Forbidden => 4403,
            Self::Unavailable => 1013,
            Self::TooBig => 1009,
            Self::Protocol => 1002,
        }
    }

    /// The close reason text (at most 123 bytes).
    pub fn text(self) -> &'static str {
        match self {
            Self::TokenExpired => "token expired",
            Self::Unauthenticated => "not authenticated",
            Self::Forbidden => "forbidden: the caller may no longer use this session",
            Self::Unavailable => "authorization unavailable, try again later",
            Self::TooBig => "message over the body limit",
            Self::Protocol => "malformed frame",
        }
    }
}

/// What the reader found in a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A data message (one operation) starts with the frame at `offset`.
    MessageStart {
        /// Offset of the frame's first byte in the chunk.
        offset: usize,
    },
    /// The message being read is over the limit; its frame starts at
    /// `offset`.
    TooBig {
        /// Offset of the frame's first byte in the chunk.
        offset: usize,
    },
    /// The bytes from `offset` on are not a frame.
    Malformed {
        /// Offset of the first bad byte's frame.
        offset: usize,
    },
}

/// Incremental frame-header reader over the client's bytes.
#[derive(Debug, Clone)]
pub struct FrameReader {
    max_message: u64,
    /// Bytes of the current frame's header read so far.
    header: [u8; 14],
    header_len: usize,
    /// Payload bytes of the current frame still to skip.
    payload_left: u64,
    /// Payload bytes of the current message so far.
    message_bytes: u64,
    /// Inside a fragmented data message (continuations expected).
    in_message: bool,
    /// Offset (in the current chunk) of the frame being read, or 0 if its
    /// header began in an earlier chunk (whose bytes are forwarded already:
    /// a Close put there lands mid-header, and the owner then ends the
    /// socket as malformed — it still carries nothing of the message).
    frame_start: usize,
    broken: bool,
}

/// The header length a header starting with `b0, b1` needs.
fn header_len(b1: u8) -> usize {
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + ext + if b1 & 0x80 != 0 { 4 } else { 0 }
}

fn payload_len(h: &[u8]) -> u64 {
    match h[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([h[2], h[3]])),
        127 => u64::from_be_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]),
        n => u64::from(n),
    }
}

impl FrameReader {
    /// A reader holding each message to `max_message` payload bytes.
    pub fn new(max_message: u64) -> Self {
        Self {
            max_message,
            header: [0; 14],
            header_len: 0,
            payload_left: 0,
            message_bytes: 0,
            in_message: false,
            frame_start: 0,
            broken: false,
        }
    }

    /// Reads `chunk`, returning what it found, in order. After a
    /// `Malformed` event the reader reports nothing more.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        let mut i = 0;
        self.frame_start = 0;
        while i < chunk.len() && !self.broken {
            if self.payload_left > 0 {
                let skip = self.payload_left.min((chunk.len() - i) as u64);
                self.payload_left -= skip;
                i += skip as usize;
                continue;
            }
            if self.header_len == 0 {
                self.frame_start = i;
            }
            self.header[self.header_len] = chunk[i];
            self.header_len += 1;
            i += 1;
            if self.header_len < 2 || self.header_len < header_len(self.header[1]) {
                continue;
            }
            let h = self.header;
            self.header_len = 0;
            if let Some(ev) = self.frame(&h, self.frame_start) {
                events.push(ev);
                if matches!(ev, Event::Malformed { .. }) {
                    self.broken = true;
                }
            }
        }
        events
    }

    /// Takes one complete frame header.
    fn frame(&mut self, h: &[u8; 14], offset: usize) -> Option<Event> {
        let fin = h[0] & 0x80 != 0;
        let opcode = h[0] & 0x0f;
        let masked = h[1] & 0x80 != 0;
        let len = payload_len(h);
        self.payload_left = len;
        // Clients must mask; reserved bits must be clear (no extension is
        // negotiated through the gateway).
        if !masked || h[0] & 0x70 != 0 {
            return Some(Event::Malformed { offset });
        }
        match opcode {
            // Control frames: never fragmented, at most 125 bytes.
            0x8..=0xa => (!fin || len > 125).then_some(Event::Malformed { offset }),
            0x1 | 0x2 => {
                if self.in_message {
                    return Some(Event::Malformed { offset });
                }
                self.in_message = !fin;
                self.message_bytes = len;
                if len > self.max_message {
                    return Some(Event::TooBig { offset });
                }
                Some(Event::MessageStart { offset })
            }
            0x0 => {
                if !self.in_message {
                    return Some(Event::Malformed { offset });
                }
                self.in_message = !fin;
                self.message_bytes = self.message_bytes.saturating_add(len);
                (self.message_bytes > self.max_message).then_some(Event::TooBig { offset })
            }
            _ => Some(Event::Malformed { offset }),
        }
    }
}

/// A masked Close frame with `reason`'s code and text, as a client sends
/// it (the owner's WebSocket refuses unmasked client frames).
pub fn close_frame(reason: CloseReason) -> Vec<u8> {
    let mut payload = reason.code().to_be_bytes().to_vec();
    payload.extend_from_slice(reason.text().as_bytes());
    // The key only has to differ per connection for caches the gateway
    // never is; any value is valid.
    let key: [u8; 4] = rand_key();
    let mut frame = vec![0x88, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&key);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    frame
}

fn rand_key() -> [u8; 4] {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos | 1).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
        let n = payload.len();
        if n < 126 {
            f.push(0x80 | n as u8);
        } else if n <= 0xffff {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
        let key = [1, 2, 3, 4];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        f
    }

    #[test]
    fn each_data_message_is_one_start_wherever_the_chunks_split() {
        let mut bytes = frame(true, 1, b"{\"type\":\"send\"}");
        bytes.extend(frame(true, 9, b"ping"));
        bytes.extend(frame(false, 2, &[7; 300]));
        bytes.extend(frame(true, 0, &[7; 70_000]));
        bytes.extend(frame(true, 1, b"x"));
        let last = bytes.len() - frame(true, 1, b"x").len();
        for split in [1, 2, 3, 7, 100, 4096, bytes.len()] {
            let mut r = FrameReader::new(1 << 20);
            let mut got = Vec::new();
            for chunk in bytes.chunks(split) {
                for ev in r.feed(chunk) {
                    match ev {
                        Event::MessageStart { offset } => got.push(offset),
                        other => panic!("{other:?} at split {split}"),
                    }
                }
            }
            // Three data messages: the first, the fragmented one, the last.
            assert_eq!(got.len(), 3, "split {split}: {got:?}");
        }
        // In one chunk, each start is the frame's own offset.
        let mut r = FrameReader::new(1 << 20);
        let starts: Vec<usize> = r
            .feed(&bytes)
            .into_iter()
            .map(|ev| match ev {
                Event::MessageStart { offset } => offset,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(starts[0], 0);
        assert_eq!(starts[2], last);
    }

    #[test]
    fn the_limit_is_per_message_not_per_connection() {
        let mut r = FrameReader::new(1000);
        for _ in 0..50 {
            let ev = r.feed(&frame(true, 1, &[b'a'; 900]));
            assert_eq!(ev, vec![Event::MessageStart { offset: 0 }]);
        }
        assert_eq!(
            r.feed(&frame(true, 1, &[b'a'; 1001])),
            vec![Event::TooBig { offset: 0 }]
        );
        let mut r = FrameReader::new(1000);
        let mut parts = frame(false, 1, &[b'a'; 600]);
        let second = parts.len();
        parts.extend(frame(true, 0, &[b'a'; 600]));
        assert_eq!(
            r.feed(&parts),
            vec![
                Event::MessageStart { offset: 0 },
                Event::TooBig { offset: second }
            ]
        );
    }

    #[test]
    fn unmasked_reserved_or_out_of_order_frames_are_malformed() {
        let mut unmasked = frame(true, 1, b"hi");
        unmasked[1] &= 0x7f;
        unmasked.truncate(2);
        unmasked.extend_from_slice(b"hi");
        let mut reserved = frame(true, 1, b"hi");
        reserved[0] |= 0x40;
        for bad in [
            unmasked,
            reserved,
            frame(true, 0, b"stray continuation"),
            frame(false, 9, b"fragmented ping"),
            frame(true, 3, b"reserved opcode"),
        ] {
            let mut r = FrameReader::new(1 << 20);
            assert_eq!(r.feed(&bad), vec![Event::Malformed { offset: 0 }]);
            assert!(r.feed(&frame(true, 1, b"after")).is_empty());
        }
        let mut r = FrameReader::new(1 << 20);
        let mut two = frame(false, 1, b"a");
        two.extend(frame(true, 1, b"b"));
        assert_eq!(
            r.feed(&two),
            vec![
                Event::MessageStart { offset: 0 },
                Event::Malformed { offset: 7 }
            ]
        );
    }

    #[test]
    fn close_frames_are_masked_and_carry_code_and_reason() {
        for reason in [
            CloseReason::TokenExpired,
            CloseReason::Forbidden,
            CloseReason::Unavailable,
            CloseReason::TooBig,
            CloseReason::Protocol,
            CloseReason::Unauthenticated,
        ] {
            let f = close_frame(reason);
            assert_eq!(f[0], 0x88);
            assert!(f[1] & 0x80 != 0, "masked");
            let len = (f[1] & 0x7f) as usize;
            assert!(len <= 125);
            let key = &f[2..6];
            let payload: Vec<u8> = f[6..]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            assert_eq!(payload.len(), len);
            assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), reason.code());
            assert_eq!(&payload[2..], reason.text().as_bytes());
            // The reader takes it as a control frame.
            assert!(FrameReader::new(10).feed(&f).is_empty());
        }
    }
}
