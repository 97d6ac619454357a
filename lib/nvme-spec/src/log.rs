//! Log pages: identifiers, the Error Information entry, SMART / Health
//! Information, the Changed Namespace List, and the completion dword of
//! an Asynchronous Event Request that points at them.
//!
//! The discovery log page (LID 0x70) has its own module,
//! [`crate::discovery`].

use zerocopy::little_endian::{U128, U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::bits::u8_at;
use crate::status::Status;

pub use crate::identify::NamespaceList as ChangedNamespaceList;

/// Log page identifiers (NVMe Base Specification 2.0, figure 202).
pub mod lid {
    /// Supported Log Pages.
    pub const SUPPORTED_LOG_PAGES: u8 = 0x00;
    /// Error Information (64-byte entries).
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information (512 bytes).
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE_SLOT: u8 = 0x03;
    /// Changed Namespace List (4096 bytes).
    pub const CHANGED_NS_LIST: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const COMMANDS_EFFECTS: u8 = 0x05;
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: u8 = 0x06;
    /// Telemetry Host-Initiated.
    pub const TELEMETRY_HOST: u8 = 0x07;
    /// Telemetry Controller-Initiated.
    pub const TELEMETRY_CONTROLLER: u8 = 0x08;
    /// Endurance Group Information.
    pub const ENDURANCE_GROUP: u8 = 0x09;
    /// Asymmetric Namespace Access.
    pub const ANA: u8 = 0x0c;
    /// Persistent Event Log.
    pub const PERSISTENT_EVENT: u8 = 0x0d;
    /// LBA Status Information.
    pub const LBA_STATUS: u8 = 0x0e;
    /// Feature Identifiers Supported and Effects.
    pub const FEATURE_IDS_EFFECTS: u8 = 0x12;
    /// Discovery (fabrics discovery controllers; see [`crate::discovery`]).
    pub const DISCOVERY: u8 = 0x70;
    /// Reservation Notification.
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
    /// Sanitize Status.
    pub const SANITIZE_STATUS: u8 = 0x81;
}

/// One Error Information log entry (64 bytes).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
)]
pub struct ErrorLogEntry {
    /// Error count: unique, increasing id of the error (0 = empty entry).
    pub error_count: U64,
    /// Submission queue of the failed command (0xffff = none).
    pub sqid: U16,
    /// Command id of the failed command (0xffff = none).
    pub cid: U16,
    /// Phase tag (bit 0) and status field (bits 15:1) of the completion.
    pub status: U16,
    /// Byte (bits 7:0) and bit (bits 10:8) of the command where the error is.
    pub parm_error_location: U16,
    /// First LBA that had the error.
    pub lba: U64,
    /// Namespace of the error.
    pub nsid: U32,
    /// Vendor specific log page with more information (0 = none).
    pub vs: u8,
    /// Transport type (fabrics).
    pub trtype: u8,
    /// Reserved.
    pub rsvd30: [u8; 2],
    /// Command specific information.
    pub cs: U64,
    /// Transport type specific information.
    pub trtype_spec: U16,
    /// Reserved.
    pub rsvd42: [u8; 21],
    /// Log page version.
    pub version: u8,
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<ErrorLogEntry>() == 64);
    assert!(offset_of!(ErrorLogEntry, sqid) == 8);
    assert!(offset_of!(ErrorLogEntry, status) == 12);
    assert!(offset_of!(ErrorLogEntry, lba) == 16);
    assert!(offset_of!(ErrorLogEntry, nsid) == 24);
    assert!(offset_of!(ErrorLogEntry, trtype) == 29);
    assert!(offset_of!(ErrorLogEntry, cs) == 32);
    assert!(offset_of!(ErrorLogEntry, trtype_spec) == 40);
    assert!(offset_of!(ErrorLogEntry, version) == 63);
};

impl ErrorLogEntry {
    /// The status of the failed command.
    #[must_use]
    pub fn status(&self) -> Status {
        Status::from_cqe_word(self.status.get()).0
    }

    /// Whether the entry is empty (error count 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.error_count.get() == 0
    }
}

/// Critical warning bits of the SMART / Health log.
pub mod critical_warning {
    /// Available spare below threshold.
    pub const SPARE: u8 = 1 << 0;
    /// Temperature above or below a threshold.
    pub const TEMPERATURE: u8 = 1 << 1;
    /// NVM subsystem reliability degraded.
    pub const RELIABILITY: u8 = 1 << 2;
    /// Media placed in read only mode.
    pub const READ_ONLY: u8 = 1 << 3;
    /// Volatile memory backup device failed.
    pub const VOLATILE_BACKUP: u8 = 1 << 4;
    /// Persistent memory region became read only.
    pub const PMR_READ_ONLY: u8 = 1 << 5;
}

/// SMART / Health Information log page (512 bytes).
#[repr(C)]
#[derive(Debug, Clone, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct SmartLog {
    /// Critical warnings ([`critical_warning`]).
    pub critical_warning: u8,
    /// Composite temperature, kelvin.
    pub temperature: U16,
    /// Available spare, percent.
    pub avail_spare: u8,
    /// Available spare threshold, percent.
    pub spare_thresh: u8,
    /// Percentage used (may exceed 100).
    pub percent_used: u8,
    /// Endurance group critical warning summary.
    pub endurance_group_warning: u8,
    /// Reserved.
    pub rsvd7: [u8; 25],
    /// Data units read, thousands of 512-byte units.
    pub data_units_read: U128,
    /// Data units written, thousands of 512-byte units.
    pub data_units_written: U128,
    /// Host read commands.
    pub host_reads: U128,
    /// Host write commands.
    pub host_writes: U128,
    /// Controller busy time, minutes.
    pub ctrl_busy_time: U128,
    /// Power cycles.
    pub power_cycles: U128,
    /// Power on hours.
    pub power_on_hours: U128,
    /// Unsafe shutdowns.
    pub unsafe_shutdowns: U128,
    /// Media and data integrity errors.
    pub media_errors: U128,
    /// Number of error information log entries over the life of the controller.
    pub num_err_log_entries: U128,
    /// Warning composite temperature time, minutes.
    pub warning_temp_time: U32,
    /// Critical composite temperature time, minutes.
    pub critical_temp_time: U32,
    /// Temperature sensors 1..8, kelvin (0 = not implemented).
    pub temp_sensor: [U16; 8],
    /// Thermal management temperature 1 transition count.
    pub thm_temp1_trans_count: U32,
    /// Thermal management temperature 2 transition count.
    pub thm_temp2_trans_count: U32,
    /// Total time for thermal management temperature 1, seconds.
    pub thm_temp1_total_time: U32,
    /// Total time for thermal management temperature 2, seconds.
    pub thm_temp2_total_time: U32,
    /// Reserved.
    pub rsvd232: [u8; 280],
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<SmartLog>() == 512);
    assert!(offset_of!(SmartLog, temperature) == 1);
    assert!(offset_of!(SmartLog, avail_spare) == 3);
    assert!(offset_of!(SmartLog, percent_used) == 5);
    assert!(offset_of!(SmartLog, data_units_read) == 32);
    assert!(offset_of!(SmartLog, host_writes) == 80);
    assert!(offset_of!(SmartLog, power_on_hours) == 128);
    assert!(offset_of!(SmartLog, num_err_log_entries) == 176);
    assert!(offset_of!(SmartLog, warning_temp_time) == 192);
    assert!(offset_of!(SmartLog, temp_sensor) == 200);
    assert!(offset_of!(SmartLog, thm_temp1_trans_count) == 216);
    assert!(offset_of!(SmartLog, rsvd232) == 232);
};

impl Default for SmartLog {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// Asynchronous event types (completion dword 0 bits 2:0).
pub mod event_type {
    /// Error status.
    pub const ERROR: u8 = 0;
    /// SMART / health status.
    pub const SMART: u8 = 1;
    /// Notice.
    pub const NOTICE: u8 = 2;
    /// Immediate.
    pub const IMMEDIATE: u8 = 3;
    /// One-shot.
    pub const ONE_SHOT: u8 = 4;
    /// I/O command set specific status.
    pub const IO_COMMAND_SET: u8 = 6;
    /// Vendor specific.
    pub const VENDOR: u8 = 7;
}

/// Notice event information values (with [`event_type::NOTICE`]).
pub mod notice {
    /// Namespace attribute changed: read the Changed Namespace List.
    pub const NS_ATTRIBUTE_CHANGED: u8 = 0x00;
    /// Firmware activation starting.
    pub const FIRMWARE_ACTIVATION_STARTING: u8 = 0x01;
    /// Telemetry log changed.
    pub const TELEMETRY_LOG_CHANGED: u8 = 0x02;
    /// Asymmetric namespace access change.
    pub const ANA_CHANGE: u8 = 0x03;
    /// Predictable latency event aggregate log change.
    pub const PREDICTABLE_LATENCY_CHANGE: u8 = 0x04;
    /// LBA status information alert.
    pub const LBA_STATUS_ALERT: u8 = 0x05;
    /// Endurance group event aggregate log page change.
    pub const ENDURANCE_GROUP_CHANGE: u8 = 0x06;
    /// Discovery log page change (discovery controllers).
    pub const DISCOVERY_LOG_CHANGE: u8 = 0xf0;
}

/// Completion dword 0 of an Asynchronous Event Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AsyncEvent {
    /// Event type ([`event_type`], 3 bits).
    pub kind: u8,
    /// Event information ([`notice`] for notices).
    pub info: u8,
    /// The log page to read (it clears the event unless RAE is set).
    pub lid: u8,
}

impl AsyncEvent {
    /// Encodes completion dword 0.
    #[must_use]
    pub fn to_dword(self) -> u32 {
        u32::from(self.kind & 7) | (u32::from(self.info) << 8) | (u32::from(self.lid) << 16)
    }

    /// Decodes completion dword 0.
    #[must_use]
    pub fn from_dword(dw: u32) -> Self {
        AsyncEvent {
            kind: u8_at(dw, 0) & 7,
            info: u8_at(dw, 8),
            lid: u8_at(dw, 16),
        }
    }

    /// The event a target sends when namespaces change.
    #[must_use]
    pub fn ns_changed() -> Self {
        AsyncEvent {
            kind: event_type::NOTICE,
            info: notice::NS_ATTRIBUTE_CHANGED,
            lid: lid::CHANGED_NS_LIST,
        }
    }
}

/// Serves a Get Log Page: copies `page[offset..]` into `out` and zeroes
/// what lies past the end of the page; returns the bytes copied from the
/// page. A target builds the whole page, then answers any offset and
/// length with this.
pub fn copy_log_page(page: &[u8], offset: u64, out: &mut [u8]) -> usize {
    let start = usize::try_from(offset).map_or(page.len(), |o| o.min(page.len()));
    let n = (page.len() - start).min(out.len());
    out[..n].copy_from_slice(&page[start..start + n]);
    out[n..].fill(0);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_entry_status() {
        let mut e = ErrorLogEntry::default();
        assert!(e.is_empty());
        e.error_count.set(3);
        e.status
            .set(Status::LBA_OUT_OF_RANGE.with_dnr().to_cqe_word(true));
        assert_eq!(e.status(), Status::LBA_OUT_OF_RANGE.with_dnr());
        assert_eq!(&e.as_bytes()[12..14], &[0x01, 0x81]);
    }

    #[test]
    fn smart_counters() {
        let mut b = [0u8; 512];
        b[1] = 0x43;
        b[2] = 0x01;
        b[32] = 0x10;
        b[47] = 0x01;
        let s = SmartLog::read_from_bytes(&b).unwrap();
        assert_eq!(s.temperature.get(), 323);
        assert_eq!(s.data_units_read.get(), (1u128 << 120) | 0x10);
    }

    #[test]
    fn copy_log_page_offsets() {
        let page: Vec<u8> = (1..=10).collect();
        let mut out = [0xff; 4];
        assert_eq!(copy_log_page(&page, 0, &mut out), 4);
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(copy_log_page(&page, 8, &mut out), 2);
        assert_eq!(out, [9, 10, 0, 0]);
        assert_eq!(copy_log_page(&page, 10, &mut out), 0);
        assert_eq!(copy_log_page(&page, u64::MAX, &mut out), 0);
        assert_eq!(out, [0; 4]);
    }

    #[test]
    fn async_event_dword() {
        let ev = AsyncEvent::ns_changed();
        assert_eq!(ev.to_dword(), 0x0004_0002);
        assert_eq!(AsyncEvent::from_dword(0x0004_0002), ev);
        let d = AsyncEvent {
            kind: event_type::NOTICE,
            info: notice::DISCOVERY_LOG_CHANGE,
            lid: lid::DISCOVERY,
        };
        assert_eq!(AsyncEvent::from_dword(d.to_dword()), d);
        assert_eq!(d.to_dword(), 0x0070_f002);
    }
}
