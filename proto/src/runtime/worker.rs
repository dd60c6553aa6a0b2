//! The pipe protocol of the built-in server's Python worker (see the
//! server's `worker.py`), spoken by the server and, over the fast path
//! ([`super::lease`]), by runtimed: a 4-byte big-endian length, a one-byte
//! tag, an 8-byte big-endian sequence number, then the payload. Every
//! invocation has a sequence number of its own and the worker's reply
//! carries it back, so a reply can be matched to the request it answers —
//! one that does not match is never an answer. The framing is pure;
//! [`exchange`] runs one request and its reply over any pair of pipes.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
/// The handler returned (JSON output), and its artifacts directory is not
/// empty: something is to be collected.
pub const OUTPUT_ARTIFACTS: u8 = b'a';
/// The handler raised (JSON `{type, message}`).
pub const ERROR: u8 = b'e';
/// The handler returned a value JSON cannot hold (a `set`, `NaN`, an
/// object): JSON `{type, message}` of the serialization error.
pub const INVALID_OUTPUT: u8 = b'v';

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

/// Reads one frame of at most `max` payload bytes; a larger one is
/// reported by its header alone (the pipe is then out of step).
pub async fn read<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<(Header, Option<Vec<u8>>)> {
    let mut head = [0u8; HEADER];
    r.read_exact(&mut head).await?;
    let h = header(&head).map_err(std::io::Error::other)?;
    if h.payload > max {
        return Ok((h, None));
    }
    let mut body = vec![0u8; h.payload];
    r.read_exact(&mut body).await?;
    Ok((h, Some(body)))
}

/// Writes one frame.
pub async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    tag: u8,
    seq: u64,
    payload: &[u8],
) -> std::io::Result<()> {
    let f = encode(tag, seq, payload).map_err(std::io::Error::other)?;
    w.write_all(&f).await?;
    w.flush().await
}

/// The bounded `(type, message)` of an error frame's JSON body.
pub fn error_of(body: &[u8]) -> (String, String) {
    #[derive(serde::Deserialize)]
    struct E {
        #[serde(rename = "type")]
        kind: String,
        message: String,
    }
    match serde_json::from_slice::<E>(body) {
        Ok(e) => (
            crate::api::truncate_utf8(e.kind, 128),
            crate::api::truncate_utf8(e.message, 1024),
        ),
        Err(_) => ("Error".into(), "handler failed".into()),
    }
}

/// What a worker answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The handler's JSON output, and whether it left anything in its
    /// artifacts directory ([`OUTPUT_ARTIFACTS`]).
    Output {
        /// The JSON document.
        body: Vec<u8>,
        /// The artifacts directory is not empty.
        artifacts_left: bool,
    },
    /// The handler raised.
    Raised {
        /// Exception type.
        kind: String,
        /// Bounded message.
        message: String,
    },
    /// The handler returned a value that is not JSON-serializable: why.
    Unserializable(String),
}

/// Why an exchange has no answer. Each leaves the pipes in an unknown
/// state: the worker must be replaced.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// A pipe broke: the worker died.
    #[error("worker pipe failed: {0}")]
    Pipe(#[from] std::io::Error),
    /// A reply that is not this request's, or not a reply at all.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The output is larger than the bound.
    #[error("output of {0} bytes exceeds the {1}-byte limit")]
    TooLarge(usize, usize),
    /// A frame that is neither output nor error.
    #[error("worker sent an unexpected frame")]
    Unexpected,
}

/// One invocation: request `seq` with `input`, then its reply.
pub async fn exchange<W, R>(
    w: &mut W,
    r: &mut R,
    seq: u64,
    input: &[u8],
    max_output: usize,
) -> Result<Answer, ExchangeError>
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    write(w, INVOKE, seq, input).await?;
    let (h, body) = read(r, max_output).await?;
    answers(&h, seq)?;
    let body = body.ok_or(ExchangeError::TooLarge(h.payload, max_output))?;
    match h.tag {
        OUTPUT => Ok(Answer::Output {
            body,
            artifacts_left: false,
        }),
        OUTPUT_ARTIFACTS => Ok(Answer::Output {
            body,
            artifacts_left: true,
        }),
        ERROR => {
            let (kind, message) = error_of(&body);
            Ok(Answer::Raised { kind, message })
        }
        INVALID_OUTPUT => {
            let (kind, message) = error_of(&body);
            Ok(Answer::Unserializable(format!(
                "the handler's return value is not JSON-serializable ({kind}: {message})"
            )))
        }
        _ => Err(ExchangeError::Unexpected),
    }
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

    #[tokio::test]
    async fn an_output_says_whether_the_artifacts_directory_holds_anything() {
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        let worker = tokio::spawn(async move {
            for (seq, tag) in [(1, OUTPUT_ARTIFACTS), (2, OUTPUT)] {
                read(&mut theirs, 1024).await.unwrap();
                write(&mut theirs, tag, seq, b"1").await.unwrap();
            }
            theirs
        });
        let (mut r, mut w) = tokio::io::split(&mut ours);
        for (seq, left) in [(1, true), (2, false)] {
            let a = exchange(&mut w, &mut r, seq, b"{}", 1024).await.unwrap();
            assert_eq!(
                a,
                Answer::Output {
                    body: b"1".to_vec(),
                    artifacts_left: left
                }
            );
        }
        drop(worker.await.unwrap());
    }

    #[tokio::test]
    async fn an_exchange_matches_its_reply_and_refuses_another() {
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        let worker = tokio::spawn(async move {
            let (h, body) = read(&mut theirs, 1024).await.unwrap();
            assert_eq!((h.tag, h.seq), (INVOKE, 5));
            write(&mut theirs, OUTPUT, 5, &body.unwrap()).await.unwrap();
            read(&mut theirs, 1024).await.unwrap();
            // An answer to an earlier request.
            write(&mut theirs, OUTPUT, 5, b"{}").await.unwrap();
            theirs
        });
        let (mut r, mut w) = tokio::io::split(&mut ours);
        let a = exchange(&mut w, &mut r, 5, b"{\"a\":1}", 1024)
            .await
            .unwrap();
        assert_eq!(
            a,
            Answer::Output {
                body: b"{\"a\":1}".to_vec(),
                artifacts_left: false
            }
        );
        let e = exchange(&mut w, &mut r, 6, b"{}", 1024).await.unwrap_err();
        assert!(
            matches!(
                e,
                ExchangeError::Frame(FrameError::OutOfStep {
                    expected: 6,
                    got: 5
                })
            ),
            "{e:?}"
        );
        drop(worker.await.unwrap());
    }

    #[tokio::test]
    async fn raised_and_unserializable_answers_are_told_apart() {
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        let worker = tokio::spawn(async move {
            read(&mut theirs, 1024).await.unwrap();
            let raised = br#"{"type": "ValueError", "message": "bad"}"#;
            write(&mut theirs, ERROR, 1, raised).await.unwrap();
            read(&mut theirs, 1024).await.unwrap();
            let set = br#"{"type": "TypeError", "message": "Object of type set is not JSON serializable"}"#;
            write(&mut theirs, INVALID_OUTPUT, 2, set).await.unwrap();
            theirs
        });
        let (mut r, mut w) = tokio::io::split(&mut ours);
        let a = exchange(&mut w, &mut r, 1, b"{}", 1024).await.unwrap();
        assert_eq!(
            a,
            Answer::Raised {
                kind: "ValueError".into(),
                message: "bad".into()
            }
        );
        let a = exchange(&mut w, &mut r, 2, b"{}", 1024).await.unwrap();
        assert_eq!(
            a,
            Answer::Unserializable(
                "the handler's return value is not JSON-serializable (TypeError: Object of type set is not JSON serializable)".into()
            )
        );
        drop(worker.await.unwrap());
    }

    #[test]
    fn error_bodies_are_bounded() {
        let body = serde_json::json!({"type": "ValueError", "message": "x".repeat(5000)});
        let (kind, message) = error_of(body.to_string().as_bytes());
        assert_eq!(kind, "ValueError");
        assert!(message.len() <= 1024 + 3);
        assert_eq!(error_of(b"nope"), ("Error".into(), "handler failed".into()));
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
