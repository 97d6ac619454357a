//! Command opcodes: admin, NVM I/O and fabrics (opcode 0x7f with a
//! fabrics command type).
//!
//! Each set is an enum (`#[repr(u8)]`, the value is the opcode) with
//! [`from_u8`](AdminOpcode::from_u8) for decoding a received command and
//! [`name`](AdminOpcode::name) for logs. Bits 1:0 of an opcode say which
//! way its data moves ([`DataTransfer`]); the same holds for a fabrics
//! command type.

/// Defines a `#[repr(u8)]` enum of opcodes with `from_u8` and `name`.
macro_rules! opcodes {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $val:literal, $text:literal;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name {
            $($(#[$vm])* $v = $val,)*
        }

        impl $name {
            /// The opcode's enum value, or `None` for one this crate does not name.
            #[must_use]
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v {
                    $($val => Some(Self::$v),)*
                    _ => None,
                }
            }

            /// The command's name, for logs.
            #[must_use]
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$v => $text,)*
                }
            }

            /// Which way the command's data moves (bits 1:0 of the opcode).
            #[must_use]
            pub const fn data_transfer(self) -> DataTransfer {
                DataTransfer::of(self as u8)
            }
        }

        impl From<$name> for u8 {
            fn from(o: $name) -> u8 {
                o as u8
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

opcodes! {
    /// Admin command set opcodes (NVMe Base Specification 2.0, figure 28).
    AdminOpcode {
        /// Delete I/O Submission Queue.
        DeleteIoSq = 0x00, "Delete I/O SQ";
        /// Create I/O Submission Queue.
        CreateIoSq = 0x01, "Create I/O SQ";
        /// Get Log Page.
        GetLogPage = 0x02, "Get Log Page";
        /// Delete I/O Completion Queue.
        DeleteIoCq = 0x04, "Delete I/O CQ";
        /// Create I/O Completion Queue.
        CreateIoCq = 0x05, "Create I/O CQ";
        /// Identify.
        Identify = 0x06, "Identify";
        /// Abort.
        Abort = 0x08, "Abort";
        /// Set Features.
        SetFeatures = 0x09, "Set Features";
        /// Get Features.
        GetFeatures = 0x0a, "Get Features";
        /// Asynchronous Event Request.
        AsyncEventRequest = 0x0c, "Asynchronous Event Request";
        /// Namespace Management.
        NamespaceManagement = 0x0d, "Namespace Management";
        /// Firmware Commit.
        FirmwareCommit = 0x10, "Firmware Commit";
        /// Firmware Image Download.
        FirmwareImageDownload = 0x11, "Firmware Image Download";
        /// Device Self-test.
        DeviceSelfTest = 0x14, "Device Self-test";
        /// Namespace Attachment.
        NamespaceAttachment = 0x15, "Namespace Attachment";
        /// Keep Alive.
        KeepAlive = 0x18, "Keep Alive";
        /// Directive Send.
        DirectiveSend = 0x19, "Directive Send";
        /// Directive Receive.
        DirectiveReceive = 0x1a, "Directive Receive";
        /// Virtualization Management.
        VirtualizationManagement = 0x1c, "Virtualization Management";
        /// NVMe-MI Send.
        NvmeMiSend = 0x1d, "NVMe-MI Send";
        /// NVMe-MI Receive.
        NvmeMiReceive = 0x1e, "NVMe-MI Receive";
        /// Capacity Management.
        CapacityManagement = 0x20, "Capacity Management";
        /// Lockdown.
        Lockdown = 0x24, "Lockdown";
        /// Doorbell Buffer Config.
        DoorbellBufferConfig = 0x7c, "Doorbell Buffer Config";
        /// Fabrics command (the command type is in byte 4): see [`FabricsType`].
        Fabrics = 0x7f, "Fabrics";
        /// Format NVM.
        FormatNvm = 0x80, "Format NVM";
        /// Security Send.
        SecuritySend = 0x81, "Security Send";
        /// Security Receive.
        SecurityReceive = 0x82, "Security Receive";
        /// Sanitize.
        Sanitize = 0x84, "Sanitize";
        /// Get LBA Status.
        GetLbaStatus = 0x86, "Get LBA Status";
    }
}

opcodes! {
    /// NVM command set I/O opcodes (NVM Command Set Specification 1.0).
    NvmOpcode {
        /// Flush.
        Flush = 0x00, "Flush";
        /// Write.
        Write = 0x01, "Write";
        /// Read.
        Read = 0x02, "Read";
        /// Write Uncorrectable.
        WriteUncorrectable = 0x04, "Write Uncorrectable";
        /// Compare.
        Compare = 0x05, "Compare";
        /// Write Zeroes.
        WriteZeroes = 0x08, "Write Zeroes";
        /// Dataset Management (deallocate = unmap).
        DatasetManagement = 0x09, "Dataset Management";
        /// Verify.
        Verify = 0x0c, "Verify";
        /// Reservation Register.
        ReservationRegister = 0x0d, "Reservation Register";
        /// Reservation Report.
        ReservationReport = 0x0e, "Reservation Report";
        /// Reservation Acquire.
        ReservationAcquire = 0x11, "Reservation Acquire";
        /// Reservation Release.
        ReservationRelease = 0x15, "Reservation Release";
        /// Copy.
        Copy = 0x19, "Copy";
        /// Fabrics command on an I/O queue (Connect of an I/O queue).
        Fabrics = 0x7f, "Fabrics";
    }
}

opcodes! {
    /// Fabrics command types (byte 4 of a command with opcode 0x7f; NVMe
    /// Base Specification 2.0, figure 541).
    FabricsType {
        /// Property Set.
        PropertySet = 0x00, "Property Set";
        /// Connect.
        Connect = 0x01, "Connect";
        /// Property Get.
        PropertyGet = 0x04, "Property Get";
        /// Authentication Send.
        AuthenticationSend = 0x05, "Authentication Send";
        /// Authentication Receive.
        AuthenticationReceive = 0x06, "Authentication Receive";
        /// Disconnect.
        Disconnect = 0x08, "Disconnect";
    }
}

/// The opcode of every fabrics command (admin and I/O queues alike).
pub const FABRICS_OPCODE: u8 = 0x7f;

/// First vendor specific admin opcode (0xc0..=0xff).
pub const ADMIN_VENDOR_SPECIFIC_START: u8 = 0xc0;

/// First vendor specific I/O opcode (0x80..=0xff in the NVM command set).
pub const NVM_VENDOR_SPECIFIC_START: u8 = 0x80;

/// The direction of a command's data, from bits 1:0 of its opcode (or
/// fabrics command type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataTransfer {
    /// No data.
    None,
    /// Host to controller (a write).
    HostToController,
    /// Controller to host (a read).
    ControllerToHost,
    /// Both directions.
    Bidirectional,
}

impl DataTransfer {
    /// The direction encoded in bits 1:0 of `opcode`.
    #[must_use]
    pub const fn of(opcode: u8) -> Self {
        match opcode & 3 {
            0 => DataTransfer::None,
            1 => DataTransfer::HostToController,
            2 => DataTransfer::ControllerToHost,
            _ => DataTransfer::Bidirectional,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_round_trip() {
        assert_eq!(AdminOpcode::Identify as u8, 0x06);
        assert_eq!(AdminOpcode::FormatNvm as u8, 0x80);
        assert_eq!(NvmOpcode::WriteZeroes as u8, 0x08);
        assert_eq!(NvmOpcode::DatasetManagement as u8, 0x09);
        assert_eq!(FabricsType::PropertyGet as u8, 0x04);
        for v in 0..=255u8 {
            if let Some(o) = AdminOpcode::from_u8(v) {
                assert_eq!(o as u8, v);
            }
            if let Some(o) = NvmOpcode::from_u8(v) {
                assert_eq!(u8::from(o), v);
            }
            if let Some(o) = FabricsType::from_u8(v) {
                assert_eq!(o as u8, v);
            }
        }
        assert_eq!(AdminOpcode::from_u8(0x03), None);
        assert_eq!(NvmOpcode::Read.to_string(), "Read");
    }

    #[test]
    fn data_direction_from_low_bits() {
        assert_eq!(
            NvmOpcode::Write.data_transfer(),
            DataTransfer::HostToController
        );
        assert_eq!(
            NvmOpcode::Read.data_transfer(),
            DataTransfer::ControllerToHost
        );
        assert_eq!(NvmOpcode::Flush.data_transfer(), DataTransfer::None);
        assert_eq!(
            AdminOpcode::Identify.data_transfer(),
            DataTransfer::ControllerToHost
        );
        assert_eq!(
            FabricsType::Connect.data_transfer(),
            DataTransfer::HostToController
        );
        assert_eq!(DataTransfer::of(0x7f), DataTransfer::Bidirectional);
    }
}
