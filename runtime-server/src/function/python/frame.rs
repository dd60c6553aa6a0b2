//! The framing of the worker protocol (see `worker.py`): a 4-byte
//! big-endian length, a one-byte tag, an 8-byte big-endian sequence number,
//! then the payload. Every invocation has a sequence number of its own and
//! the worker's reply carries it back, so a reply can be matched to the
//! request it answers — one that does not match is never an answer. Pure.

/// Bytes before the payload: length, tag, sequence.
pub const HEADER: usize = 4 + 1 + 8;
/// What the length counts besides the payload: tag and sequence.
const OVERHEAD: usize = 1 + 8;

/// Load a handler into a spare (JSON `{module, function, cwd, env}`).
pub const LOAD: u8 = b'l';
/// Invoke the handler (JSON input).
pub const INVOKE: u8 = b'i';
/// The handler is loaded.
pub const READY: u8 = b'r';
/// Loading failed (JSON `{type, message}`).
pub const LOAD_FAILED: u8 = b'f';
/// The handler returned (JSON output).
pub const OUTPUT: u8 = b'o';
/// The handler raised (JSON `{type, message}`).
pub const ERROR: u8 = b'e';

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub tag: u8,
    /// The invocation it belongs to (0 for loading).
    pub seq: u64,
    /// Payload bytes that follow.
    pub payload: usize,
}

/// A frame that cannot be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The length is smaller than tag and sequence.
    #[error("worker sent a malformed frame")]
    Malformed,
    /// The payload does not fit in a frame.
    #[error("frame payload of {0} bytes is too large")]
    TooLarge(usize),
    /// A reply to another request than the one in flight.
    #[error("worker answered request {got} while {expected} was in flight")]
    OutOfStep {
        /// The request in flight.
        expected: u64,
        /// The request the reply names.
        got: u64,
    },
}

/// Encodes one frame.
pub fn encode(tag: u8, seq: u64, payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let len =
        u32::try_from(payload.len() + OVERHEAD).map_err(|_| FrameError::TooLarge(payload.len()))?;
    let mut frame = Vec::with_capacity(HEADER + payload.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.push(tag);
    frame.extend_from_slice(&seq.to_be_bytes());
    frame.extend_from_slice(payload);
    Ok(frame)
}

/// Decodes a header.
pub fn header(bytes: &[u8; HEADER]) -> Result<Header, FrameError> {
    let [l0, l1, l2, l3, tag, s @ ..] = *bytes;
    let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    let payload = len.checked_sub(OVERHEAD).ok_or(FrameError::Malformed)?;
    Ok(Header {
        tag,
        seq: u64::from_be_bytes(s),
        payload,
    })
}

/// Checks that a reply answers request `expected`.
pub fn answers(h: &Header, expected: u64) -> Result<(), FrameError> {
    if h.seq == expected {
        Ok(())
    } else {
        Err(FrameError::OutOfStep {
            expected,
            got: h.seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_their_sequence_number() {
        let f = encode(INVOKE, 7, b"{}").unwrap();
        assert_eq!(f.len(), HEADER + 2);
        let h = header(f[..HEADER].try_into().unwrap()).unwrap();
        assert_eq!(
            h,
            Header {
                tag: INVOKE,
                seq: 7,
                payload: 2
            }
        );
        assert_eq!(&f[HEADER..], b"{}");
    }

    #[test]
    fn a_reply_to_another_request_is_out_of_step() {
        let h = Header {
            tag: OUTPUT,
            seq: 3,
            payload: 0,
        };
        assert!(answers(&h, 3).is_ok());
        assert_eq!(
            answers(&h, 4),
            Err(FrameError::OutOfStep {
                expected: 4,
                got: 3
            })
        );
    }

    #[test]
    fn lengths_shorter_than_the_header_are_malformed() {
        let mut b = [0u8; HEADER];
        b[3] = 8;
        assert_eq!(header(&b), Err(FrameError::Malformed));
        b[3] = 9;
        assert_eq!(header(&b).unwrap().payload, 0);
    }
}
