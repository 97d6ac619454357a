//! The byte side of a connection: the receive buffer (one `read` takes
//! every PDU the kernel has, up to the buffer; data bound for a request's
//! buffer goes there directly with `readv`, together with what follows),
//! and the send queue (every PDU queued since the last flush leaves in
//! one `writev`, headers, data and digests side by side).

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};

/// A nonblocking byte stream: a TCP socket, or a test's in-memory pipe.
pub trait Sock: Read + Write {}

impl<T: Read + Write> Sock for T {}

/// Receive buffer size (many PDUs per `read`) once a queue is connected.
pub(crate) const RBUF_SIZE: usize = 64 * 1024;
/// Receive buffer of a connection before its Connect (it grows to
/// [`RBUF_SIZE`] then): room for any PDU header (132 bytes at most, with
/// its digest) and more. The Connect capsule's 1 KiB of data takes a few
/// more `read`s, once per queue; a connection that never connects (idle,
/// or sending slowly until the connect timeout cuts it) holds 512 bytes,
/// not 64 KiB.
pub(crate) const RBUF_PRE_CONNECT: usize = 512;
/// Most iovecs per `writev`.
const MAX_IOV: usize = 64;

/// The receive buffer: `buf[start..end]` holds bytes read but not yet
/// consumed.
#[derive(Debug)]
pub(crate) struct RxBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

/// How a read went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadOutcome {
    /// This many bytes arrived (into the buffer and, for `read_into`, the
    /// destination first), filling all the space offered: the socket may
    /// have more.
    Got(usize),
    /// This many bytes arrived, fewer than the space offered: the socket
    /// was empty after them, so reading again before the next readable
    /// event would only return `WouldBlock` (one syscall per PDU saved).
    Drained(usize),
    /// Nothing now.
    WouldBlock,
    /// The peer closed the connection.
    Eof,
}

fn outcome(r: io::Result<usize>, offered: usize) -> io::Result<ReadOutcome> {
    match r {
        Ok(0) => Ok(ReadOutcome::Eof),
        Ok(n) if n < offered => Ok(ReadOutcome::Drained(n)),
        Ok(n) => Ok(ReadOutcome::Got(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(ReadOutcome::WouldBlock),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(ReadOutcome::Got(0)),
        Err(e) => Err(e),
    }
}

impl RxBuf {
    pub fn new(size: usize) -> RxBuf {
        RxBuf {
            buf: vec![0u8; size].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Grows the buffer to `size` bytes (never shrinks it), keeping the
    /// bytes waiting.
    pub fn grow(&mut self, size: usize) {
        if size <= self.buf.len() {
            return;
        }
        let mut buf = vec![0u8; size].into_boxed_slice();
        let n = self.len();
        buf[..n].copy_from_slice(self.avail());
        self.buf = buf;
        self.start = 0;
        self.end = n;
    }

    /// Bytes waiting to be consumed.
    #[inline]
    pub fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Number of bytes waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Drops `n` consumed bytes.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Moves the waiting bytes to the front so that a header of up to
    /// `need` bytes fits after them.
    fn make_room(&mut self, need: usize) {
        if self.buf.len() - self.start < need || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Reads into the free space of the buffer.
    pub fn read_from<S: Read>(&mut self, s: &mut S) -> io::Result<ReadOutcome> {
        self.make_room(256);
        let space = &mut self.buf[self.end..];
        let offered = space.len();
        let o = outcome(s.read(space), offered)?;
        if let ReadOutcome::Got(n) | ReadOutcome::Drained(n) = o {
            self.end += n;
        }
        Ok(o)
    }

    /// With the buffer empty: reads `dest.len()` bytes bound for a
    /// request buffer straight into `dest`, and whatever follows into the
    /// buffer, in one `readv`. Returns the bytes that went to `dest`.
    pub fn read_into<S: Read>(
        &mut self,
        s: &mut S,
        dest: &mut [u8],
    ) -> io::Result<(ReadOutcome, usize)> {
        debug_assert_eq!(self.len(), 0, "invariant: read_into with an empty buffer");
        self.start = 0;
        self.end = 0;
        let want = dest.len();
        let offered = want + self.buf.len();
        let mut iov = [IoSliceMut::new(dest), IoSliceMut::new(&mut self.buf[..])];
        let o = outcome(s.read_vectored(&mut iov), offered)?;
        let mut to_dest = 0;
        if let ReadOutcome::Got(n) | ReadOutcome::Drained(n) = o {
            to_dest = n.min(want);
            self.end = n - to_dest;
        }
        Ok((o, to_dest))
    }
}

/// What a queued PDU is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxKind {
    /// The slot's C2HData (header, data, digest) or R2T (header).
    Data,
    /// The slot's response capsule.
    Resp,
    /// The connection's control PDU (ICResp, C2HTermReq).
    Control,
}

/// One queued PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxItem {
    pub kind: TxKind,
    pub slot: u16,
}

/// The send queue.
#[derive(Debug)]
pub(crate) struct TxQueue {
    items: VecDeque<TxItem>,
    /// Bytes of the first item already sent.
    off: usize,
}

impl TxQueue {
    /// A queue that holds `cap` PDUs without growing.
    pub fn with_capacity(cap: usize) -> TxQueue {
        TxQueue {
            items: VecDeque::with_capacity(cap),
            off: 0,
        }
    }

    /// Grows the queue to hold `cap` PDUs (at connect time).
    pub fn reserve(&mut self, cap: usize) {
        self.items.reserve(cap.saturating_sub(self.items.len()));
    }

    pub fn push(&mut self, item: TxItem) {
        self.items.push_back(item);
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sends queued PDUs with `writev` until the queue is empty or the
    /// socket is full. `parts` gives an item's pieces (header, data,
    /// digest); every item fully sent is appended to `sent` (give it the
    /// queue's capacity: it then never grows). Returns whether the queue
    /// emptied.
    pub fn flush<'a, S: Write>(
        &mut self,
        s: &mut S,
        parts: impl Fn(TxItem) -> [&'a [u8]; 3],
        sent: &mut Vec<TxItem>,
    ) -> io::Result<bool> {
        while !self.items.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            let mut skip = self.off;
            'items: for item in &self.items {
                for p in parts(*item) {
                    if p.is_empty() {
                        continue;
                    }
                    if skip >= p.len() {
                        skip -= p.len();
                        continue;
                    }
                    if n_iov == MAX_IOV {
                        break 'items;
                    }
                    iov[n_iov] = IoSlice::new(&p[skip..]);
                    skip = 0;
                    n_iov += 1;
                }
            }
            if n_iov == 0 {
                // Only empty items (cannot happen with valid PDUs): drop them.
                sent.extend(self.items.drain(..));
                self.off = 0;
                break;
            }
            let mut n = match s.write_vectored(&iov[..n_iov]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            // Retire what was fully sent.
            while let Some(&item) = self.items.front() {
                let total: usize = parts(item).iter().map(|p| p.len()).sum();
                let left = total - self.off;
                if n >= left {
                    n -= left;
                    self.off = 0;
                    self.items.pop_front();
                    sent.push(item);
                } else {
                    self.off += n;
                    break;
                }
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `chunk` bytes per call.
    struct Trickle {
        out: Vec<u8>,
        chunk: usize,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(b)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(3) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = (self.chunk - n).min(b.len());
                self.out.extend_from_slice(&b[..take]);
                n += take;
                if n == self.chunk {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_keep_order() {
        let pieces: Vec<[Vec<u8>; 3]> = (0..10u8)
            .map(|i| [vec![i; 3], vec![i + 100; usize::from(i)], vec![i + 200; 4]])
            .collect();
        let mut q = TxQueue::with_capacity(16);
        for i in 0..10u16 {
            q.push(TxItem {
                kind: TxKind::Data,
                slot: i,
            });
        }
        let mut w = Trickle {
            out: Vec::new(),
            chunk: 5,
            calls: 0,
        };
        let mut done = Vec::new();
        loop {
            let empty = q
                .flush(
                    &mut w,
                    |it| {
                        let p = &pieces[usize::from(it.slot)];
                        [&p[0][..], &p[1][..], &p[2][..]]
                    },
                    &mut done,
                )
                .unwrap();
            if empty {
                break;
            }
        }
        let want: Vec<u8> = pieces.iter().flat_map(|p| p.concat()).collect();
        assert_eq!(w.out, want);
        let slots: Vec<u16> = done.iter().map(|i| i.slot).collect();
        assert_eq!(slots, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn rx_buffer_compacts_and_reads_into() {
        let mut rx = RxBuf::new(16);
        let mut src: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        // Fewer bytes than the space offered: the socket is empty now.
        assert_eq!(rx.read_from(&mut src).unwrap(), ReadOutcome::Drained(10));
        rx.consume(10);
        let mut dest = [0u8; 4];
        let mut src: &[u8] = &[9, 9, 9, 9, 1, 2];
        let (o, n) = rx.read_into(&mut src, &mut dest).unwrap();
        assert_eq!((o, n), (ReadOutcome::Drained(6), 4));
        assert_eq!(dest, [9; 4]);
        assert_eq!(rx.avail(), &[1, 2]);
        let mut empty: &[u8] = &[];
        assert_eq!(rx.read_from(&mut empty).unwrap(), ReadOutcome::Eof);
    }

    #[test]
    fn rx_buffer_grows_keeping_what_waits() {
        let mut rx = RxBuf::new(8);
        let mut src: &[u8] = &[1, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(rx.read_from(&mut src).unwrap(), ReadOutcome::Got(8));
        rx.consume(3);
        rx.grow(4);
        assert_eq!(rx.avail(), &[4, 5, 6, 7, 8]);
        rx.grow(32);
        assert_eq!(rx.avail(), &[4, 5, 6, 7, 8]);
        let mut src: &[u8] = &[9; 30];
        assert_eq!(rx.read_from(&mut src).unwrap(), ReadOutcome::Got(27));
        assert_eq!(rx.len(), 32);
        assert_eq!(&rx.avail()[..6], &[4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn a_read_that_fills_the_space_may_have_more() {
        let mut rx = RxBuf::new(4);
        let mut src: &[u8] = &[1, 2, 3, 4, 5, 6];
        assert_eq!(rx.read_from(&mut src).unwrap(), ReadOutcome::Got(4));
        let mut dest = [0u8; 2];
        rx.consume(4);
        let (o, n) = rx.read_into(&mut src, &mut dest).unwrap();
        assert_eq!((o, n), (ReadOutcome::Drained(2), 2));
        let mut src: &[u8] = &[7; 9];
        rx.consume(rx.len());
        let (o, n) = rx.read_into(&mut src, &mut dest).unwrap();
        assert_eq!((o, n), (ReadOutcome::Got(6), 2));
    }
}
