//! The wire of the worker fast path (`WorkerLeaseRequest` in
//! `runtime.proto`) and of the direct invoke path:
//! length-prefixed protobuf messages on a Unix stream socket, a lease
//! carrying the worker's pipe ends as SCM_RIGHTS ancillary data. Both ends
//! use these calls.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// Largest message of the worker fast path's wire ([`recv`]).
const MAX_MESSAGE: usize = 64 * 1024;
/// Descriptors one message may carry.
const MAX_FDS: usize = 2;

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// Sends `msg`, with `fds` attached to its first byte.
pub async fn send<M: prost::Message>(
    conn: &UnixStream,
    msg: &M,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let body = msg.encode_to_vec();
    let len = u32::try_from(body.len()).map_err(|_| invalid("message too large"))?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut sent = 0;
    while sent < frame.len() {
        conn.writable().await?;
        let attach = sent == 0 && !fds.is_empty();
        let n = conn.try_io(Interest::WRITABLE, || {
            let iov = [IoSlice::new(&frame[sent..])];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if attach && !control.push(SendAncillaryMessage::ScmRights(fds)) {
                return Err(invalid("too many descriptors"));
            }
            rustix::net::sendmsg(conn, &iov, &mut control, SendFlags::NOSIGNAL)
                .map_err(std::io::Error::from)
        });
        match n {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receives one message and the descriptors attached to it (close-on-exec).
/// A connection closed before a message starts is `UnexpectedEof`.
pub async fn recv<M: prost::Message + Default>(
    conn: &UnixStream,
) -> std::io::Result<(M, Vec<OwnedFd>)> {
    recv_up_to(conn, MAX_MESSAGE).await
}

/// Receives one message of at most `max` bytes (a longer one is
/// `InvalidData`, read no further), closing any descriptors attached: the
/// direct invoke path's wire, whose messages carry a call's input or
/// output and never descriptors.
pub async fn recv_bounded<M: prost::Message + Default>(
    conn: &UnixStream,
    max: usize,
) -> std::io::Result<M> {
    recv_up_to(conn, max).await.map(|(msg, _)| msg)
}

async fn recv_up_to<M: prost::Message + Default>(
    conn: &UnixStream,
    max: usize,
) -> std::io::Result<(M, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; 4];
    let mut have = 0;
    let mut fds = Vec::new();
    let mut want = 4;
    while have < want {
        conn.readable().await?;
        let got = conn.try_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(&mut buf[have..want])];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let r = rustix::net::recvmsg(conn, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
                .map_err(std::io::Error::from)?;
            let mut received = Vec::new();
            for msg in control.drain() {
                if let RecvAncillaryMessage::ScmRights(rights) = msg {
                    received.extend(rights);
                }
            }
            Ok((r.bytes, received))
        });
        let (n, received) = match got {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        fds.extend(received);
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        have += n;
        if have == 4 && want == 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if len > max {
                return Err(invalid("message too large"));
            }
            want = 4 + len;
            buf.resize(want, 0);
        }
    }
    let msg = M::decode(&buf[4..]).map_err(|_| invalid("malformed message"))?;
    Ok((msg, fds))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    use super::super::v1 as pb;
    use super::*;

    #[tokio::test]
    async fn a_lease_carries_its_pipe_ends_across_the_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut reader, writer) = std::io::pipe().unwrap();
        let lease = pb::WorkerLease { refusal: None };
        send(&a, &lease, &[writer.as_fd()]).await.unwrap();
        drop(writer);
        let (got, mut fds): (pb::WorkerLease, _) = recv(&b).await.unwrap();
        assert_eq!(got, lease);
        assert_eq!(fds.len(), 1);
        let mut w = std::fs::File::from(fds.remove(0));
        w.write_all(b"through the socket").unwrap();
        drop(w);
        let mut text = String::new();
        reader.read_to_string(&mut text).unwrap();
        assert_eq!(text, "through the socket");
    }

    #[tokio::test]
    async fn a_bounded_receive_takes_large_messages_up_to_its_bound_only() {
        let (a, b) = UnixStream::pair().unwrap();
        let big = pb::InvokeFunctionRequest {
            input: vec![b'x'; 3 * MAX_MESSAGE],
            ..Default::default()
        };
        let len = prost::Message::encoded_len(&big);
        let sending = tokio::spawn(async move {
            send(&a, &big, &[]).await.unwrap();
            // Refused unread: this send ends when the reader goes.
            let _ = send(&a, &big, &[]).await;
        });
        let got: pb::InvokeFunctionRequest = recv_bounded(&b, len).await.unwrap();
        assert_eq!(got.input.len(), 3 * MAX_MESSAGE);
        let refused = recv_bounded::<pb::InvokeFunctionRequest>(&b, len - 1)
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidData);
        drop(b);
        let _ = sending.await;
    }

    #[tokio::test]
    async fn messages_without_descriptors_and_a_closed_peer() {
        let (a, b) = UnixStream::pair().unwrap();
        let req = pb::WorkerLeaseRequest {
            run_uid: "uid".into(),
            handle: "fn-1".into(),
        };
        send(&a, &req, &[]).await.unwrap();
        let (got, fds): (pb::WorkerLeaseRequest, _) = recv(&b).await.unwrap();
        assert_eq!((got, fds.len()), (req, 0));
        drop(a);
        let closed = recv::<pb::WorkerRelease>(&b).await.unwrap_err();
        assert_eq!(closed.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
