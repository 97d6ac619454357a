//! NVMe-oF discovery controllers: reading the discovery log page (Get Log
//! Page, LID 70h) consistently. A controller attached with
//! [`crate::ControllerOptions::discovery`] has no I/O queues and no
//! namespaces; its asynchronous events are Discovery Log Page Change
//! notices (notice F0h), after which the host reads the page again.
//!
//! The page is a 1024-byte header (generation counter, number of records)
//! and 1024 bytes per record. It can change between the commands that
//! read it, so [`read_log`] reads the header, then the records (in pieces
//! of at most one command's transfer, by log page offset), then the
//! header again, and starts over while the generation counter moved (the
//! Linux and SPDK hosts do the same).
//!
//! Blocks on admin commands: call on a helper thread, never a reactor.

use bdevkit_nvme_spec::admin::GetLogPage;
use bdevkit_nvme_spec::discovery::{parse_discovery_log, DiscoveryLogEntry, DiscoveryLogHeader};
use bdevkit_nvme_spec::log::lid;
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::Command;

use crate::ctrlr::Controller;
use crate::error::{Error, Result};
use crate::transport::Transport;

/// Bytes of the header and of each record.
pub const RECORD_BYTES: usize = 1024;
/// Records read at most (1 MiB of log page); a page claiming more is refused.
pub const MAX_RECORDS: u64 = 1023;
/// Reads of the whole page before giving up on a page that keeps changing.
pub const MAX_TRIES: usize = 10;

/// A discovery log page, read consistently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryLogPage {
    /// Generation counter of the page read.
    pub genctr: u64,
    /// Its records.
    pub entries: Vec<DiscoveryLogEntry>,
}

fn header(buf: &[u8]) -> Result<(u64, u64)> {
    let h = buf
        .get(..RECORD_BYTES)
        .and_then(|b| DiscoveryLogHeader::read_from_bytes(b).ok())
        .ok_or_else(|| Error::Unsupported("short discovery log header".into()))?;
    Ok((h.genctr.get(), h.numrec.get()))
}

/// Reads the discovery log page through `fetch(offset, len)`, which
/// returns `len` bytes of the page from byte `offset` (one Get Log Page);
/// no read is longer than `max_chunk` bytes (at least one record).
///
/// # Errors
/// What `fetch` returns; [`Error::Unsupported`] for a page of more than
/// [`MAX_RECORDS`] records, or one that changed during each of
/// [`MAX_TRIES`] reads.
pub fn read_log_with(
    max_chunk: usize,
    mut fetch: impl FnMut(u64, u32) -> Result<Vec<u8>>,
) -> Result<DiscoveryLogPage> {
    let chunk = (max_chunk / RECORD_BYTES).max(1) * RECORD_BYTES;
    let hdr_len = u32::try_from(RECORD_BYTES).expect("invariant: 1024 fits u32");
    let mut hdr = fetch(0, hdr_len)?;
    for _ in 0..MAX_TRIES {
        let (genctr, numrec) = header(&hdr)?;
        if numrec > MAX_RECORDS {
            return Err(Error::Unsupported(format!(
                "discovery log of {numrec} records"
            )));
        }
        // numrec <= MAX_RECORDS: the product fits.
        let total = RECORD_BYTES * (usize::try_from(numrec).unwrap_or(0) + 1);
        let mut page = hdr[..RECORD_BYTES].to_vec();
        while page.len() < total {
            let len = chunk.min(total - page.len());
            let off = u64::try_from(page.len()).unwrap_or(u64::MAX);
            let part = fetch(off, u32::try_from(len).unwrap_or(u32::MAX))?;
            let got = part
                .get(..len)
                .ok_or_else(|| Error::Unsupported("short discovery log page data".into()))?;
            page.extend_from_slice(got);
        }
        if numrec > 0 {
            // Unchanged meanwhile? Otherwise this header starts the next try.
            hdr = fetch(0, hdr_len)?;
            if header(&hdr)? != (genctr, numrec) {
                tracing::debug!(genctr, "discovery log changed while read: again");
                continue;
            }
        }
        let log = parse_discovery_log(&page)
            .map_err(|e| Error::Unsupported(format!("discovery log: {e}")))?;
        return Ok(DiscoveryLogPage {
            genctr,
            entries: log.entries.to_vec(),
        });
    }
    Err(Error::Unsupported(
        "discovery log kept changing while read".into(),
    ))
}

/// Reads the discovery log page of discovery controller `c`
/// ([`read_log_with`] over Get Log Page 70h). Blocks.
///
/// # Errors
/// As [`read_log_with`]; the command's failure as [`Error::Command`].
pub fn read_log<T: Transport>(c: &Controller<T>) -> Result<DiscoveryLogPage> {
    read_log_with(c.max_transfer_bytes(), |offset, len| {
        let mut g = GetLogPage::new(lid::DISCOVERY, 0, len)
            .map_err(|e| Error::InvalidArg(e.to_string()))?;
        g.offset = offset;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        c.exec_data(g.to_sqe(0), len).map(|(_, b)| b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit_nvme_spec::discovery::{adrfam, build_discovery_log, subtype};
    use proptest::prelude::*;

    fn entry(i: usize) -> DiscoveryLogEntry {
        DiscoveryLogEntry::tcp(
            subtype::NVME,
            &format!("nqn.2016-06.io.bdevkit:s{i}"),
            adrfam::IPV4,
            "127.0.0.1",
            &format!("{}", 4420 + i),
            1,
        )
        .unwrap()
    }

    /// Serves `pages[k]` at the k-th read of the header (from 0), so that
    /// the page changes under the reader.
    fn serve(pages: Vec<Vec<u8>>) -> impl FnMut(u64, u32) -> Result<Vec<u8>> {
        let mut header_reads = 0usize;
        let mut current = 0usize;
        move |off, len| {
            if off == 0 {
                current = header_reads.min(pages.len() - 1);
                header_reads += 1;
            }
            let p = &pages[current];
            let mut out = vec![0u8; len as usize];
            bdevkit_nvme_spec::log::copy_log_page(p, off, &mut out);
            Ok(out)
        }
    }

    #[test]
    fn empty_page_is_one_read() {
        let mut reads = 0;
        let page = build_discovery_log(3, &[]);
        let log = read_log_with(4096, |off, len| {
            reads += 1;
            let mut out = vec![0u8; len as usize];
            bdevkit_nvme_spec::log::copy_log_page(&page, off, &mut out);
            Ok(out)
        })
        .unwrap();
        assert_eq!((log.genctr, log.entries.len(), reads), (3, 0, 1));
    }

    #[test]
    fn a_page_that_changes_while_read_is_read_again() {
        let old = build_discovery_log(1, &[entry(0)]);
        let new = build_discovery_log(2, &[entry(0), entry(1), entry(2)]);
        // Header of gen 1, then (re-read) gen 2: the reader starts over.
        let log = read_log_with(2048, serve(vec![old, new.clone(), new])).unwrap();
        assert_eq!(log.genctr, 2);
        assert_eq!(log.entries, vec![entry(0), entry(1), entry(2)]);
    }

    #[test]
    fn a_page_that_never_settles_is_an_error() {
        let pages: Vec<Vec<u8>> = (0..40)
            .map(|g| build_discovery_log(g, &[entry(0)]))
            .collect();
        let e = read_log_with(4096, serve(pages)).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
    }

    #[test]
    fn too_many_records_and_short_data_are_refused() {
        let mut page = build_discovery_log(1, &[]);
        page[8..16].copy_from_slice(&(MAX_RECORDS + 1).to_le_bytes());
        let p2 = page.clone();
        let e = read_log_with(4096, move |_, len| Ok(p2[..len as usize].to_vec())).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)));
        let page = build_discovery_log(1, &[entry(0)]);
        let e = read_log_with(4096, move |off, len| {
            Ok(if off == 0 {
                page[..len as usize].to_vec()
            } else {
                vec![0; 10]
            })
        })
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)));
    }

    proptest! {
        /// Any record count and chunk size: every record, in order, and no
        /// read longer than the chunk (rounded to whole records) or past
        /// the page.
        #[test]
        fn reads_every_record_in_pieces(n in 0usize..40, chunk in 0usize..20_000) {
            let entries: Vec<_> = (0..n).map(entry).collect();
            let page = build_discovery_log(9, &entries);
            let limit = (chunk / RECORD_BYTES).max(1) * RECORD_BYTES;
            let total = page.len() as u64;
            let log = read_log_with(chunk, |off, len| {
                assert!(len as usize <= limit);
                assert!(off + u64::from(len) <= total);
                let mut out = vec![0u8; len as usize];
                bdevkit_nvme_spec::log::copy_log_page(&page, off, &mut out);
                Ok(out)
            });
            let log = log.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(log.genctr, 9);
            prop_assert_eq!(log.entries, entries);
        }
    }
}
