//! Completion status: the 15-bit status field of a completion entry.
//!
//! Layout of the field (NVMe Base Specification 2.0, figure 93), as it
//! sits in bits 31:17 of completion dword 3 (bit 16 there is the phase
//! tag, not part of the status):
//!
//! | bits  | field | meaning                                   |
//! |-------|-------|-------------------------------------------|
//! | 7:0   | SC    | status code                               |
//! | 10:8  | SCT   | status code type                          |
//! | 12:11 | CRD   | command retry delay (index into CRDT1..3) |
//! | 13    | M     | more (Error Information log has detail)   |
//! | 14    | DNR   | do not retry                              |
//!
//! The Linux io_uring passthrough reports the same 15-bit field as a
//! positive `cqe.res` ([`Status::from_uring_res`]).
//!
//! Status codes are associated constants of [`Status`] with DNR, More and
//! CRD clear; compare codes with [`Status::is`], which ignores those bits.
//! Command specific codes from 0x80 mean different things for NVM I/O
//! commands and for fabrics commands; both sets are here (the fabrics
//! ones prefixed `CONNECT_` and the like), and [`Status::name`] gives the
//! I/O meaning while [`Status::fabrics_name`] gives the fabrics one.

use std::fmt;

use crate::bits::{bit, bits, flag, u16_at, u8_at};

/// Status code type: generic command status.
pub const SCT_GENERIC: u8 = 0x0;
/// Status code type: command specific status.
pub const SCT_COMMAND_SPECIFIC: u8 = 0x1;
/// Status code type: media and data integrity errors.
pub const SCT_MEDIA: u8 = 0x2;
/// Status code type: path related status.
pub const SCT_PATH: u8 = 0x3;
/// Status code type: vendor specific.
pub const SCT_VENDOR: u8 = 0x7;

/// A completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status {
    /// Status code type (3 bits).
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do not retry.
    pub dnr: bool,
    /// More: the Error Information log page has an entry for this command.
    pub more: bool,
    /// Command retry delay (2 bits; 0 = none, 1..3 = CRDT1..3 of Identify Controller).
    pub crd: u8,
}

/// Defines status-code constants on [`Status`] and the name tables.
macro_rules! codes {
    ($($table:ident($sct:expr) { $($(#[$m:meta])* $name:ident = $sc:literal, $text:literal;)* })*) => {
        impl Status {
            $($(
                $(#[$m])*
                pub const $name: Status = Status::new($sct, $sc);
            )*)*
        }

        $(
            fn $table(sc: u8) -> Option<&'static str> {
                match sc {
                    $($sc => Some($text),)*
                    _ => None,
                }
            }
        )*
    };
}

codes! {
    generic_name(SCT_GENERIC) {
        /// Successful Completion.
        SUCCESS = 0x00, "successful completion";
        /// Invalid Command Opcode.
        INVALID_OPCODE = 0x01, "invalid command opcode";
        /// Invalid Field in Command.
        INVALID_FIELD = 0x02, "invalid field in command";
        /// Command ID Conflict.
        COMMAND_ID_CONFLICT = 0x03, "command id conflict";
        /// Data Transfer Error.
        DATA_TRANSFER_ERROR = 0x04, "data transfer error";
        /// Commands Aborted due to Power Loss Notification.
        ABORTED_POWER_LOSS = 0x05, "aborted due to power loss notification";
        /// Internal Error.
        INTERNAL_ERROR = 0x06, "internal error";
        /// Command Abort Requested.
        ABORTED_BY_REQUEST = 0x07, "command abort requested";
        /// Command Aborted due to SQ Deletion.
        ABORTED_SQ_DELETION = 0x08, "aborted due to sq deletion";
        /// Command Aborted due to Failed Fused Command.
        ABORTED_FAILED_FUSED = 0x09, "aborted due to failed fused command";
        /// Command Aborted due to Missing Fused Command.
        ABORTED_MISSING_FUSED = 0x0a, "aborted due to missing fused command";
        /// Invalid Namespace or Format.
        INVALID_NAMESPACE = 0x0b, "invalid namespace or format";
        /// Command Sequence Error.
        COMMAND_SEQUENCE_ERROR = 0x0c, "command sequence error";
        /// Invalid SGL Segment Descriptor.
        INVALID_SGL_SEGMENT_DESCRIPTOR = 0x0d, "invalid sgl segment descriptor";
        /// Invalid Number of SGL Descriptors.
        INVALID_SGL_DESCRIPTOR_COUNT = 0x0e, "invalid number of sgl descriptors";
        /// Data SGL Length Invalid.
        DATA_SGL_LENGTH_INVALID = 0x0f, "data sgl length invalid";
        /// Metadata SGL Length Invalid.
        METADATA_SGL_LENGTH_INVALID = 0x10, "metadata sgl length invalid";
        /// SGL Descriptor Type Invalid.
        SGL_DESCRIPTOR_TYPE_INVALID = 0x11, "sgl descriptor type invalid";
        /// Invalid Use of Controller Memory Buffer.
        INVALID_CMB_USE = 0x12, "invalid use of controller memory buffer";
        /// PRP Offset Invalid.
        PRP_OFFSET_INVALID = 0x13, "prp offset invalid";
        /// Atomic Write Unit Exceeded.
        ATOMIC_WRITE_UNIT_EXCEEDED = 0x14, "atomic write unit exceeded";
        /// Operation Denied.
        OPERATION_DENIED = 0x15, "operation denied";
        /// SGL Offset Invalid.
        SGL_OFFSET_INVALID = 0x16, "sgl offset invalid";
        /// Host Identifier Inconsistent Format.
        HOST_ID_INCONSISTENT_FORMAT = 0x18, "host identifier inconsistent format";
        /// Keep Alive Timer Expired.
        KEEP_ALIVE_EXPIRED = 0x19, "keep alive timer expired";
        /// Keep Alive Timeout Invalid.
        KEEP_ALIVE_INVALID = 0x1a, "keep alive timeout invalid";
        /// Command Aborted due to Preempt and Abort.
        ABORTED_PREEMPT = 0x1b, "aborted due to preempt and abort";
        /// Sanitize Failed.
        SANITIZE_FAILED = 0x1c, "sanitize failed";
        /// Sanitize In Progress.
        SANITIZE_IN_PROGRESS = 0x1d, "sanitize in progress";
        /// SGL Data Block Granularity Invalid.
        SGL_DATA_BLOCK_GRANULARITY_INVALID = 0x1e, "sgl data block granularity invalid";
        /// Command Not Supported for Queue in CMB.
        NOT_SUPPORTED_FOR_QUEUE_IN_CMB = 0x1f, "command not supported for queue in cmb";
        /// Namespace is Write Protected.
        NAMESPACE_WRITE_PROTECTED = 0x20, "namespace is write protected";
        /// Command Interrupted.
        COMMAND_INTERRUPTED = 0x21, "command interrupted";
        /// Transient Transport Error (e.g. an NVMe/TCP data digest error).
        TRANSIENT_TRANSPORT_ERROR = 0x22, "transient transport error";
        /// Command Prohibited by Command and Feature Lockdown.
        PROHIBITED_BY_LOCKDOWN = 0x23, "command prohibited by lockdown";
        /// Admin Command Media Not Ready.
        ADMIN_MEDIA_NOT_READY = 0x24, "admin command media not ready";
        /// LBA Out of Range.
        LBA_OUT_OF_RANGE = 0x80, "lba out of range";
        /// Capacity Exceeded.
        CAPACITY_EXCEEDED = 0x81, "capacity exceeded";
        /// Namespace Not Ready.
        NAMESPACE_NOT_READY = 0x82, "namespace not ready";
        /// Reservation Conflict.
        RESERVATION_CONFLICT = 0x83, "reservation conflict";
        /// Format In Progress.
        FORMAT_IN_PROGRESS = 0x84, "format in progress";
    }
    command_specific_name(SCT_COMMAND_SPECIFIC) {
        /// Completion Queue Invalid (Create I/O SQ).
        COMPLETION_QUEUE_INVALID = 0x00, "completion queue invalid";
        /// Invalid Queue Identifier.
        INVALID_QUEUE_ID = 0x01, "invalid queue identifier";
        /// Invalid Queue Size.
        INVALID_QUEUE_SIZE = 0x02, "invalid queue size";
        /// Abort Command Limit Exceeded.
        ABORT_LIMIT_EXCEEDED = 0x03, "abort command limit exceeded";
        /// Asynchronous Event Request Limit Exceeded.
        AER_LIMIT_EXCEEDED = 0x05, "asynchronous event request limit exceeded";
        /// Invalid Firmware Slot.
        INVALID_FIRMWARE_SLOT = 0x06, "invalid firmware slot";
        /// Invalid Firmware Image.
        INVALID_FIRMWARE_IMAGE = 0x07, "invalid firmware image";
        /// Invalid Interrupt Vector.
        INVALID_INTERRUPT_VECTOR = 0x08, "invalid interrupt vector";
        /// Invalid Log Page.
        INVALID_LOG_PAGE = 0x09, "invalid log page";
        /// Invalid Format.
        INVALID_FORMAT = 0x0a, "invalid format";
        /// Firmware Activation Requires Conventional Reset.
        FIRMWARE_NEEDS_CONVENTIONAL_RESET = 0x0b, "firmware activation requires conventional reset";
        /// Invalid Queue Deletion.
        INVALID_QUEUE_DELETION = 0x0c, "invalid queue deletion";
        /// Feature Identifier Not Saveable.
        FEATURE_NOT_SAVEABLE = 0x0d, "feature identifier not saveable";
        /// Feature Not Changeable.
        FEATURE_NOT_CHANGEABLE = 0x0e, "feature not changeable";
        /// Feature Not Namespace Specific.
        FEATURE_NOT_NAMESPACE_SPECIFIC = 0x0f, "feature not namespace specific";
        /// Firmware Activation Requires NVM Subsystem Reset.
        FIRMWARE_NEEDS_SUBSYSTEM_RESET = 0x10, "firmware activation requires nvm subsystem reset";
        /// Firmware Activation Requires Controller Level Reset.
        FIRMWARE_NEEDS_RESET = 0x11, "firmware activation requires controller level reset";
        /// Firmware Activation Requires Maximum Time Violation.
        FIRMWARE_NEEDS_MAX_TIME_VIOLATION = 0x12, "firmware activation requires maximum time violation";
        /// Firmware Activation Prohibited.
        FIRMWARE_ACTIVATION_PROHIBITED = 0x13, "firmware activation prohibited";
        /// Overlapping Range.
        OVERLAPPING_RANGE = 0x14, "overlapping range";
        /// Namespace Insufficient Capacity.
        NAMESPACE_INSUFFICIENT_CAPACITY = 0x15, "namespace insufficient capacity";
        /// Namespace Identifier Unavailable.
        NAMESPACE_ID_UNAVAILABLE = 0x16, "namespace identifier unavailable";
        /// Namespace Already Attached.
        NAMESPACE_ALREADY_ATTACHED = 0x18, "namespace already attached";
        /// Namespace Is Private.
        NAMESPACE_IS_PRIVATE = 0x19, "namespace is private";
        /// Namespace Not Attached.
        NAMESPACE_NOT_ATTACHED = 0x1a, "namespace not attached";
        /// Thin Provisioning Not Supported.
        THIN_PROVISIONING_NOT_SUPPORTED = 0x1b, "thin provisioning not supported";
        /// Controller List Invalid.
        CONTROLLER_LIST_INVALID = 0x1c, "controller list invalid";
        /// Device Self-test In Progress.
        SELF_TEST_IN_PROGRESS = 0x1d, "device self-test in progress";
        /// Boot Partition Write Prohibited.
        BOOT_PARTITION_WRITE_PROHIBITED = 0x1e, "boot partition write prohibited";
        /// Invalid Controller Identifier.
        INVALID_CONTROLLER_ID = 0x1f, "invalid controller identifier";
        /// Invalid Secondary Controller State.
        INVALID_SECONDARY_CONTROLLER_STATE = 0x20, "invalid secondary controller state";
        /// Invalid Number of Controller Resources.
        INVALID_CONTROLLER_RESOURCES = 0x21, "invalid number of controller resources";
        /// Invalid Resource Identifier.
        INVALID_RESOURCE_ID = 0x22, "invalid resource identifier";
        /// Sanitize Prohibited While Persistent Memory Region is Enabled.
        SANITIZE_PROHIBITED = 0x23, "sanitize prohibited while pmr is enabled";
        /// ANA Group Identifier Invalid.
        ANA_GROUP_ID_INVALID = 0x24, "ana group identifier invalid";
        /// ANA Attach Failed.
        ANA_ATTACH_FAILED = 0x25, "ana attach failed";
        /// Insufficient Capacity.
        INSUFFICIENT_CAPACITY = 0x26, "insufficient capacity";
        /// Namespace Attachment Limit Exceeded.
        NAMESPACE_ATTACH_LIMIT_EXCEEDED = 0x27, "namespace attachment limit exceeded";
        /// Prohibition of Command Execution Not Supported.
        PROHIBITION_NOT_SUPPORTED = 0x28, "prohibition of command execution not supported";
        /// I/O Command Set Not Supported.
        IO_COMMAND_SET_NOT_SUPPORTED = 0x29, "i/o command set not supported";
        /// I/O Command Set Not Enabled.
        IO_COMMAND_SET_NOT_ENABLED = 0x2a, "i/o command set not enabled";
        /// I/O Command Set Combination Rejected.
        IO_COMMAND_SET_COMBINATION_REJECTED = 0x2b, "i/o command set combination rejected";
        /// Invalid I/O Command Set.
        INVALID_IO_COMMAND_SET = 0x2c, "invalid i/o command set";
        /// Identifier Unavailable.
        IDENTIFIER_UNAVAILABLE = 0x2d, "identifier unavailable";
        /// Conflicting Attributes (NVM I/O: Dataset Management, Read, Write).
        CONFLICTING_ATTRIBUTES = 0x80, "conflicting attributes";
        /// Invalid Protection Information (NVM I/O).
        INVALID_PROTECTION_INFO = 0x81, "invalid protection information";
        /// Attempted Write to Read Only Range (NVM I/O).
        WRITE_TO_READ_ONLY_RANGE = 0x82, "attempted write to read only range";
        /// Command Size Limit Exceeded (NVM I/O: Dataset Management, Copy).
        COMMAND_SIZE_LIMIT_EXCEEDED = 0x83, "command size limit exceeded";
    }
    fabrics_name_table(SCT_COMMAND_SPECIFIC) {
        /// Connect: Incompatible Format (unknown RECFMT).
        CONNECT_INCOMPATIBLE_FORMAT = 0x80, "connect incompatible format";
        /// Connect: Controller Busy.
        CONNECT_CONTROLLER_BUSY = 0x81, "connect controller busy";
        /// Connect: Invalid Parameters (DW0 carries IATTR/IPO).
        CONNECT_INVALID_PARAMETERS = 0x82, "connect invalid parameters";
        /// Connect: Restart Discovery.
        CONNECT_RESTART_DISCOVERY = 0x83, "connect restart discovery";
        /// Connect: Invalid Host (the host is not allowed on the subsystem).
        CONNECT_INVALID_HOST = 0x84, "connect invalid host";
        /// Invalid Queue Type.
        INVALID_QUEUE_TYPE = 0x85, "invalid queue type";
        /// Discover: Restart (the discovery log changed while read).
        DISCOVER_RESTART = 0x90, "discover restart";
        /// Authentication Required.
        AUTHENTICATION_REQUIRED = 0x91, "authentication required";
    }
    media_name(SCT_MEDIA) {
        /// Write Fault.
        WRITE_FAULT = 0x80, "write fault";
        /// Unrecovered Read Error.
        UNRECOVERED_READ_ERROR = 0x81, "unrecovered read error";
        /// End-to-end Guard Check Error.
        GUARD_CHECK_ERROR = 0x82, "end-to-end guard check error";
        /// End-to-end Application Tag Check Error.
        APPLICATION_TAG_CHECK_ERROR = 0x83, "end-to-end application tag check error";
        /// End-to-end Reference Tag Check Error.
        REFERENCE_TAG_CHECK_ERROR = 0x84, "end-to-end reference tag check error";
        /// Compare Failure.
        COMPARE_FAILURE = 0x85, "compare failure";
        /// Access Denied.
        ACCESS_DENIED = 0x86, "access denied";
        /// Deallocated or Unwritten Logical Block.
        DEALLOCATED_OR_UNWRITTEN = 0x87, "deallocated or unwritten logical block";
        /// End-to-end Storage Tag Check Error.
        STORAGE_TAG_CHECK_ERROR = 0x88, "end-to-end storage tag check error";
    }
    path_name(SCT_PATH) {
        /// Internal Path Error.
        INTERNAL_PATH_ERROR = 0x00, "internal path error";
        /// Asymmetric Access Persistent Loss.
        ANA_PERSISTENT_LOSS = 0x01, "asymmetric access persistent loss";
        /// Asymmetric Access Inaccessible.
        ANA_INACCESSIBLE = 0x02, "asymmetric access inaccessible";
        /// Asymmetric Access Transition.
        ANA_TRANSITION = 0x03, "asymmetric access transition";
        /// Controller Pathing Error.
        CONTROLLER_PATHING_ERROR = 0x60, "controller pathing error";
        /// Host Pathing Error.
        HOST_PATHING_ERROR = 0x70, "host pathing error";
        /// Command Aborted By Host.
        ABORTED_BY_HOST = 0x71, "command aborted by host";
    }
}

impl Status {
    /// A status of type `sct` with code `sc`; DNR, More and CRD clear.
    #[must_use]
    pub const fn new(sct: u8, sc: u8) -> Self {
        Status {
            sct: sct & 7,
            sc,
            dnr: false,
            more: false,
            crd: 0,
        }
    }

    /// The same status with DNR set.
    #[must_use]
    pub const fn with_dnr(mut self) -> Self {
        self.dnr = true;
        self
    }

    /// The same status with More set.
    #[must_use]
    pub const fn with_more(mut self) -> Self {
        self.more = true;
        self
    }

    /// The same status with command retry delay `crd` (0..=3).
    #[must_use]
    pub const fn with_crd(mut self, crd: u8) -> Self {
        self.crd = crd & 3;
        self
    }

    /// Decodes the 15-bit status field (SC in bits 7:0).
    #[must_use]
    #[inline]
    pub const fn from_field(field: u16) -> Self {
        if field == 0 {
            // Almost every completion: no bit to pick apart.
            Status::SUCCESS
        } else {
            Status::decode(field)
        }
    }

    /// [`Status::from_field`] of a non-zero field.
    #[inline(never)]
    const fn decode(field: u16) -> Self {
        let f = field as u32;
        Status {
            sc: u8_at(f, 0),
            sct: u8_at(bits(f, 8, 3), 0),
            crd: u8_at(bits(f, 11, 2), 0),
            more: bit(f, 13),
            dnr: bit(f, 14),
        }
    }

    /// Encodes the 15-bit status field.
    #[must_use]
    pub const fn to_field(self) -> u16 {
        u16_at(
            (self.sc as u32)
                | (((self.sct & 7) as u32) << 8)
                | (((self.crd & 3) as u32) << 11)
                | flag(self.more, 13)
                | flag(self.dnr, 14),
            0,
        )
    }

    /// Decodes bits 31:16 of completion dword 3: the phase tag (bit 16)
    /// and the status (bits 31:17).
    #[must_use]
    pub const fn from_cqe_word(word: u16) -> (Self, bool) {
        (Status::from_field(word >> 1), word & 1 != 0)
    }

    /// Encodes bits 31:16 of completion dword 3 with phase tag `phase`.
    #[must_use]
    pub const fn to_cqe_word(self, phase: bool) -> u16 {
        (self.to_field() << 1) | phase as u16
    }

    /// Decodes completion dword 3 (CID in bits 15:0): the status and the
    /// phase tag.
    #[must_use]
    pub const fn from_dw3(dw3: u32) -> (Self, bool) {
        Status::from_cqe_word(u16_at(dw3, 16))
    }

    /// Decodes `cqe.res` of an io_uring NVMe passthrough completion:
    /// `Ok` with the NVMe status for `res >= 0` (0 is success; a positive
    /// value is the 15-bit status field, e.g. 0x4001 = DNR + invalid
    /// opcode), `Err(errno)` (positive) for a negative `res`: the kernel
    /// failed the command without an NVMe status.
    pub fn from_uring_res(res: i32) -> Result<Self, i32> {
        match u32::try_from(res) {
            Ok(v) => Ok(Status::from_field(u16_at(v & 0x7fff, 0))),
            // Negative errno; i32::MIN cannot come from the kernel: EIO.
            Err(_) => Err(res.checked_neg().unwrap_or(libc::EIO)),
        }
    }

    /// Whether the command succeeded.
    #[must_use]
    pub const fn is_success(self) -> bool {
        self.sct == SCT_GENERIC && self.sc == 0
    }

    /// Whether a failed command may be retried: it failed and DNR is
    /// clear (the spec's rule; a host may still choose not to retry).
    #[must_use]
    pub const fn is_retryable(self) -> bool {
        !self.is_success() && !self.dnr
    }

    /// Whether `self` and `other` have the same type and code (DNR, More
    /// and CRD ignored): `st.is(Status::INVALID_OPCODE)`.
    #[must_use]
    pub const fn is(self, other: Status) -> bool {
        self.sct == other.sct && self.sc == other.sc
    }

    /// Whether the command was aborted (by request, SQ deletion, a failed
    /// or missing fused command, preempt and abort, or by the host).
    #[must_use]
    pub const fn is_aborted(self) -> bool {
        match self.sct {
            SCT_GENERIC => matches!(self.sc, 0x05 | 0x07..=0x0a | 0x1b),
            SCT_PATH => self.sc == 0x71,
            _ => false,
        }
    }

    /// Whether a Compare failed on a data mismatch (Media: Compare Failure).
    #[must_use]
    pub const fn is_compare_failure(self) -> bool {
        self.is(Status::COMPARE_FAILURE)
    }

    /// The status's name for logs (command specific codes from 0x80 in
    /// their NVM I/O meaning), or `None` for a code this crate does not
    /// name.
    #[must_use]
    pub fn name(self) -> Option<&'static str> {
        match self.sct {
            SCT_GENERIC => generic_name(self.sc),
            SCT_COMMAND_SPECIFIC => command_specific_name(self.sc),
            SCT_MEDIA => media_name(self.sc),
            SCT_PATH => path_name(self.sc),
            _ => None,
        }
    }

    /// Like [`Status::name`], but command specific codes from 0x80 in
    /// their fabrics (Connect, Discover, authentication) meaning.
    #[must_use]
    pub fn fabrics_name(self) -> Option<&'static str> {
        if self.sct == SCT_COMMAND_SPECIFIC && self.sc >= 0x80 {
            return fabrics_name_table(self.sc);
        }
        self.name()
    }
}

impl fmt::Display for Status {
    /// `invalid field in command (sct 0x0, sc 0x02, dnr)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n)?,
            None if self.sct == SCT_VENDOR => f.write_str("vendor specific status")?,
            None => f.write_str("unknown status")?,
        }
        write!(f, " (sct {:#x}, sc {:#04x}", self.sct, self.sc)?;
        if self.dnr {
            f.write_str(", dnr")?;
        }
        if self.more {
            f.write_str(", more")?;
        }
        if self.crd != 0 {
            write!(f, ", crd {}", self.crd)?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        // The harness README: 0x4001 = DNR + invalid opcode.
        let s = Status::from_uring_res(0x4001).unwrap();
        assert!(s.is(Status::INVALID_OPCODE));
        assert!(s.dnr && !s.more);
        assert!(!s.is_retryable());
        assert_eq!(Status::from_uring_res(0), Ok(Status::SUCCESS));
        assert_eq!(Status::from_uring_res(-libc::EINTR), Err(libc::EINTR));
        assert_eq!(Status::from_uring_res(i32::MIN), Err(libc::EIO));
        // Media / compare failure 0x285.
        assert!(Status::from_field(0x0285).is_compare_failure());
        // LBA out of range with DNR, as a CQE dword 3 with phase 1 and CID 9.
        let st = Status::LBA_OUT_OF_RANGE.with_dnr();
        let dw3 = (u32::from(st.to_cqe_word(true)) << 16) | 9;
        assert_eq!(dw3, 0x8101_0009);
        assert_eq!(Status::from_dw3(dw3), (st, true));
    }

    #[test]
    fn classifiers() {
        assert!(Status::SUCCESS.is_success());
        assert!(!Status::SUCCESS.is_retryable());
        assert!(Status::NAMESPACE_NOT_READY.is_retryable());
        assert!(!Status::NAMESPACE_NOT_READY.with_dnr().is_retryable());
        assert!(Status::ABORTED_SQ_DELETION.is_aborted());
        assert!(Status::ABORTED_BY_HOST.is_aborted());
        assert!(!Status::INVALID_FIELD.is_aborted());
        assert!(!Status::SUCCESS.with_dnr().is(Status::INVALID_OPCODE));
        assert!(Status::CONNECT_INVALID_HOST.is(Status::new(1, 0x84)));
    }

    #[test]
    fn names_and_display() {
        assert_eq!(
            Status::INVALID_FIELD.with_dnr().to_string(),
            "invalid field in command (sct 0x0, sc 0x02, dnr)"
        );
        assert_eq!(
            Status::WRITE_TO_READ_ONLY_RANGE.fabrics_name(),
            Some("connect invalid parameters")
        );
        assert_eq!(
            Status::CONNECT_INVALID_PARAMETERS.name(),
            Some("attempted write to read only range")
        );
        assert_eq!(
            Status::INVALID_QUEUE_ID.fabrics_name(),
            Some("invalid queue identifier")
        );
        assert_eq!(
            Status::new(7, 0xc0).with_more().with_crd(2).to_string(),
            "vendor specific status (sct 0x7, sc 0xc0, more, crd 2)"
        );
        assert_eq!(
            Status::new(2, 0x10).to_string(),
            "unknown status (sct 0x2, sc 0x10)"
        );
        assert_eq!(
            Status::UNRECOVERED_READ_ERROR.name(),
            Some("unrecovered read error")
        );
        assert_eq!(
            Status::ANA_TRANSITION.name(),
            Some("asymmetric access transition")
        );
    }

    proptest! {
        #[test]
        fn field_round_trip(field in 0u16..0x8000) {
            let s = Status::from_field(field);
            prop_assert_eq!(s.to_field(), field);
            let (back, phase) = Status::from_cqe_word(s.to_cqe_word(true));
            prop_assert_eq!(back, s);
            prop_assert!(phase);
            prop_assert_eq!(Status::from_uring_res(i32::from(field)), Ok(s));
        }

        #[test]
        fn fields_round_trip(sct in 0u8..8, sc: u8, dnr: bool, more: bool, crd in 0u8..4) {
            let s = Status { sct, sc, dnr, more, crd };
            prop_assert_eq!(Status::from_field(s.to_field()), s);
            let success = sct == 0 && sc == 0;
            prop_assert_eq!(s.is_retryable(), !success && !dnr);
        }
    }
}
