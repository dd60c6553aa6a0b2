//! A process's output ring: the last bytes it wrote, by offset, for the
//! clients that connect later. Pure.

use std::collections::VecDeque;

use bytes::Bytes;
use kruntimes_proto::runtime::v1 as pb;

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A terminal (both).
    Pty,
}

impl Stream {
    pub(super) fn wire(self) -> pb::ProcessStream {
        match self {
            Stream::Stdout => pb::ProcessStream::Stdout,
            Stream::Stderr => pb::ProcessStream::Stderr,
            Stream::Pty => pb::ProcessStream::Pty,
        }
    }
}

/// The last `capacity` bytes a process wrote, by offset (the count of
/// bytes it wrote up to a chunk's end). Pure.
#[derive(Debug)]
pub struct Ring {
    chunks: VecDeque<(Stream, Bytes, u64)>,
    held: usize,
    total: u64,
    capacity: usize,
}

/// What a client reads from a [`Ring`] past its offset.
#[derive(Debug, PartialEq, Eq)]
pub struct Since {
    /// Bytes dropped between the client's offset and the first chunk.
    pub lost: u64,
    /// The chunks, each with its end offset.
    pub chunks: Vec<(Stream, Bytes, u64)>,
}

impl Ring {
    /// An empty ring of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            held: 0,
            total: 0,
            capacity,
        }
    }

    /// Appends `data`, dropping the oldest chunks past the capacity (of a
    /// chunk larger than the ring, its tail).
    pub fn push(&mut self, stream: Stream, mut data: Bytes) {
        self.total += data.len() as u64;
        if data.len() > self.capacity {
            data = data.slice(data.len() - self.capacity..);
        }
        self.held += data.len();
        self.chunks.push_back((stream, data, self.total));
        while self.held > self.capacity {
            match self.chunks.pop_front() {
                Some((_, d, _)) => self.held -= d.len(),
                None => break,
            }
        }
    }

    /// Bytes written so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// What was written past `offset`: the chunks still held (the first
    /// cut at `offset` when it falls inside one) and how many bytes past
    /// `offset` are gone.
    pub fn since(&self, offset: u64) -> Since {
        let mut out = Since {
            lost: 0,
            chunks: Vec::new(),
        };
        let oldest = self.total - self.held as u64;
        if offset < oldest {
            out.lost = oldest - offset;
        }
        for (stream, data, end) in &self.chunks {
            if *end <= offset {
                continue;
            }
            let start = end - data.len() as u64;
            let data = if start < offset {
                data.slice((offset - start) as usize..)
            } else {
                data.clone()
            };
            out.chunks.push((*stream, data, *end));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn text(since: &Since) -> String {
        since
            .chunks
            .iter()
            .map(|(_, d, _)| String::from_utf8_lossy(d).into_owned())
            .collect()
    }

    #[test]
    fn a_ring_replays_everything_it_holds_from_any_offset() {
        let mut r = Ring::new(100);
        r.push(Stream::Stdout, b("hello "));
        r.push(Stream::Stderr, b("world"));
        assert_eq!(r.total(), 11);
        let all = r.since(0);
        assert_eq!((all.lost, text(&all)), (0, "hello world".into()));
        assert_eq!(all.chunks[1].0, Stream::Stderr);
        assert_eq!(all.chunks[1].2, 11);
        // Inside a chunk: its tail.
        let mid = r.since(3);
        assert_eq!((mid.lost, text(&mid)), (0, "lo world".into()));
        assert!(r.since(11).chunks.is_empty());
        assert!(r.since(50).chunks.is_empty());
    }

    #[test]
    fn a_full_ring_drops_the_oldest_and_says_how_much_a_reader_lost() {
        let mut r = Ring::new(10);
        for s in ["aaaa", "bbbb", "cccc", "dddd"] {
            r.push(Stream::Stdout, b(s));
        }
        // 16 written, 8 held ("ccccdddd"): the two oldest chunks went.
        assert_eq!(r.total(), 16);
        let from_start = r.since(0);
        assert_eq!((from_start.lost, text(&from_start)), (8, "ccccdddd".into()));
        let from_6 = r.since(6);
        assert_eq!((from_6.lost, text(&from_6)), (2, "ccccdddd".into()));
        let from_10 = r.since(10);
        assert_eq!((from_10.lost, text(&from_10)), (0, "ccdddd".into()));
    }

    #[test]
    fn a_chunk_larger_than_the_ring_keeps_its_tail() {
        let mut r = Ring::new(4);
        r.push(Stream::Pty, b("0123456789"));
        let s = r.since(0);
        assert_eq!((s.lost, text(&s)), (6, "6789".into()));
        assert_eq!(s.chunks[0].2, 10);
    }

    #[test]
    fn memory_stays_within_the_capacity_whatever_is_written() {
        let mut r = Ring::new(1000);
        for i in 0..10_000u32 {
            r.push(
                Stream::Stdout,
                Bytes::from(vec![b'x'; (i % 97) as usize + 1]),
            );
            assert!(r.held <= 1000);
        }
        let held: usize = r.chunks.iter().map(|(_, d, _)| d.len()).sum();
        assert_eq!(held, r.held);
    }
}
