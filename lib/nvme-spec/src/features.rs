//! Features: identifiers and typed values of the ones the drivers and
//! the target use.
//!
//! A feature's value travels in Set Features dword 11 and comes back in
//! completion dword 0 of Get Features (Number of Queues answers with the
//! counts allocated, same layout). Each typed value implements
//! [`Feature`]; [`crate::admin::SetFeatures::of`] and
//! [`crate::admin::GetFeatures::of`] build the commands.

use crate::bits::{bit, bits, flag, u16_at, u8_at};

/// Feature identifiers (NVMe Base Specification 2.0, figure 317).
pub mod fid {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// LBA Range Type.
    pub const LBA_RANGE_TYPE: u8 = 0x03;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    /// Interrupt Vector Configuration.
    pub const INTERRUPT_VECTOR_CONFIG: u8 = 0x09;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY: u8 = 0x0a;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0b;
    /// Autonomous Power State Transition.
    pub const AUTONOMOUS_POWER_STATE_TRANSITION: u8 = 0x0c;
    /// Host Memory Buffer.
    pub const HOST_MEMORY_BUFFER: u8 = 0x0d;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 0x0e;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0f;
    /// Host Controlled Thermal Management.
    pub const HOST_THERMAL_MANAGEMENT: u8 = 0x10;
    /// Non-Operational Power State Config.
    pub const NON_OPERATIONAL_POWER_STATE: u8 = 0x11;
    /// Read Recovery Level Config.
    pub const READ_RECOVERY_LEVEL: u8 = 0x12;
    /// Predictable Latency Mode Config.
    pub const PREDICTABLE_LATENCY_CONFIG: u8 = 0x13;
    /// Predictable Latency Mode Window.
    pub const PREDICTABLE_LATENCY_WINDOW: u8 = 0x14;
    /// Host Behavior Support.
    pub const HOST_BEHAVIOR: u8 = 0x16;
    /// Sanitize Config.
    pub const SANITIZE_CONFIG: u8 = 0x17;
    /// Endurance Group Event Configuration.
    pub const ENDURANCE_GROUP_EVENT: u8 = 0x18;
    /// I/O Command Set Profile.
    pub const IO_COMMAND_SET_PROFILE: u8 = 0x19;
    /// Spinup Control.
    pub const SPINUP_CONTROL: u8 = 0x1a;
    /// Software Progress Marker.
    pub const SOFTWARE_PROGRESS_MARKER: u8 = 0x80;
    /// Host Identifier (data: 8 or 16 bytes).
    pub const HOST_IDENTIFIER: u8 = 0x81;
    /// Reservation Notification Mask.
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    /// Reservation Persistence.
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
    /// Namespace Write Protection Config.
    pub const NAMESPACE_WRITE_PROTECTION: u8 = 0x84;
}

/// A feature whose value is one dword (Set Features dword 11, Get
/// Features completion dword 0).
pub trait Feature: Sized {
    /// The feature identifier.
    const FID: u8;

    /// Encodes the value.
    fn to_dword(&self) -> u32;

    /// Decodes a value.
    fn from_dword(dw: u32) -> Self;
}

/// What Get Features with select 3 reports (completion dword 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FeatureCapabilities {
    /// The value can be saved.
    pub saveable: bool,
    /// The feature is namespace specific.
    pub namespace_specific: bool,
    /// The value can be changed.
    pub changeable: bool,
}

impl FeatureCapabilities {
    /// Decodes completion dword 0.
    #[must_use]
    pub fn from_dword(dw: u32) -> Self {
        FeatureCapabilities {
            saveable: bit(dw, 0),
            namespace_specific: bit(dw, 1),
            changeable: bit(dw, 2),
        }
    }
}

/// Arbitration (0x01).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Arbitration {
    /// Arbitration Burst (bits 2:0; 2^n commands, 7 = no limit).
    pub ab: u8,
    /// Low priority weight (0's based).
    pub lpw: u8,
    /// Medium priority weight (0's based).
    pub mpw: u8,
    /// High priority weight (0's based).
    pub hpw: u8,
}

impl Feature for Arbitration {
    const FID: u8 = fid::ARBITRATION;

    fn to_dword(&self) -> u32 {
        u32::from(self.ab & 7)
            | (u32::from(self.lpw) << 8)
            | (u32::from(self.mpw) << 16)
            | (u32::from(self.hpw) << 24)
    }

    fn from_dword(dw: u32) -> Self {
        Arbitration {
            ab: u8_at(bits(dw, 0, 3), 0),
            lpw: u8_at(dw, 8),
            mpw: u8_at(dw, 16),
            hpw: u8_at(dw, 24),
        }
    }
}

/// Power Management (0x02).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PowerManagement {
    /// Power state (bits 4:0).
    pub ps: u8,
    /// Workload hint (bits 7:5).
    pub wh: u8,
}

impl Feature for PowerManagement {
    const FID: u8 = fid::POWER_MANAGEMENT;

    fn to_dword(&self) -> u32 {
        u32::from(self.ps & 0x1f) | (u32::from(self.wh & 7) << 5)
    }

    fn from_dword(dw: u32) -> Self {
        PowerManagement {
            ps: u8_at(bits(dw, 0, 5), 0),
            wh: u8_at(bits(dw, 5, 3), 0),
        }
    }
}

/// Temperature Threshold (0x04).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TemperatureThreshold {
    /// Threshold in kelvin.
    pub tmpth: u16,
    /// Sensor (0 = composite, 1..8 = sensor n; bits 19:16).
    pub tmpsel: u8,
    /// 0 = over temperature threshold, 1 = under (bits 21:20).
    pub thsel: u8,
}

impl Feature for TemperatureThreshold {
    const FID: u8 = fid::TEMPERATURE_THRESHOLD;

    fn to_dword(&self) -> u32 {
        u32::from(self.tmpth)
            | (u32::from(self.tmpsel & 0xf) << 16)
            | (u32::from(self.thsel & 3) << 20)
    }

    fn from_dword(dw: u32) -> Self {
        TemperatureThreshold {
            tmpth: u16_at(dw, 0),
            tmpsel: u8_at(bits(dw, 16, 4), 0),
            thsel: u8_at(bits(dw, 20, 2), 0),
        }
    }
}

/// Error Recovery (0x05).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ErrorRecovery {
    /// Time limited error recovery, 100 ms units (0 = none).
    pub tler: u16,
    /// Deallocated or unwritten logical block error enable.
    pub dulbe: bool,
}

impl Feature for ErrorRecovery {
    const FID: u8 = fid::ERROR_RECOVERY;

    fn to_dword(&self) -> u32 {
        u32::from(self.tler) | flag(self.dulbe, 16)
    }

    fn from_dword(dw: u32) -> Self {
        ErrorRecovery {
            tler: u16_at(dw, 0),
            dulbe: bit(dw, 16),
        }
    }
}

/// Volatile Write Cache (0x06).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VolatileWriteCache {
    /// Write cache enabled.
    pub wce: bool,
}

impl Feature for VolatileWriteCache {
    const FID: u8 = fid::VOLATILE_WRITE_CACHE;

    fn to_dword(&self) -> u32 {
        flag(self.wce, 0)
    }

    fn from_dword(dw: u32) -> Self {
        VolatileWriteCache { wce: bit(dw, 0) }
    }
}

/// Number of Queues (0x07): I/O queue counts requested (Set Features
/// dword 11) or allocated (completion dword 0), both 0's based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NumberOfQueues {
    /// Number of I/O submission queues - 1 (NSQR / NSQA).
    pub nsqr: u16,
    /// Number of I/O completion queues - 1 (NCQR / NCQA).
    pub ncqr: u16,
}

impl NumberOfQueues {
    /// Requests `sqs` submission and `cqs` completion queues (each
    /// 1..=65535; 65535 = 0xfffe encoded, 0xffff is invalid). `None` out
    /// of range.
    #[must_use]
    pub fn from_counts(sqs: u32, cqs: u32) -> Option<Self> {
        let enc = |n: u32| {
            if (1..=0xffff).contains(&n) {
                u16::try_from(n - 1).ok()
            } else {
                None
            }
        };
        Some(NumberOfQueues {
            nsqr: enc(sqs)?,
            ncqr: enc(cqs)?,
        })
    }

    /// Submission queues (1-based).
    #[must_use]
    pub fn sq_count(&self) -> u32 {
        u32::from(self.nsqr) + 1
    }

    /// Completion queues (1-based).
    #[must_use]
    pub fn cq_count(&self) -> u32 {
        u32::from(self.ncqr) + 1
    }
}

impl Feature for NumberOfQueues {
    const FID: u8 = fid::NUMBER_OF_QUEUES;

    fn to_dword(&self) -> u32 {
        u32::from(self.nsqr) | (u32::from(self.ncqr) << 16)
    }

    fn from_dword(dw: u32) -> Self {
        NumberOfQueues {
            nsqr: u16_at(dw, 0),
            ncqr: u16_at(dw, 16),
        }
    }
}

/// Interrupt Coalescing (0x08).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InterruptCoalescing {
    /// Aggregation threshold - 1 (completions per interrupt, 0's based).
    pub thr: u8,
    /// Aggregation time, 100 µs units.
    pub time: u8,
}

impl Feature for InterruptCoalescing {
    const FID: u8 = fid::INTERRUPT_COALESCING;

    fn to_dword(&self) -> u32 {
        u32::from(self.thr) | (u32::from(self.time) << 8)
    }

    fn from_dword(dw: u32) -> Self {
        InterruptCoalescing {
            thr: u8_at(dw, 0),
            time: u8_at(dw, 8),
        }
    }
}

/// Interrupt Vector Configuration (0x09).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InterruptVectorConfig {
    /// Interrupt vector.
    pub iv: u16,
    /// Coalescing disable.
    pub cd: bool,
}

impl Feature for InterruptVectorConfig {
    const FID: u8 = fid::INTERRUPT_VECTOR_CONFIG;

    fn to_dword(&self) -> u32 {
        u32::from(self.iv) | flag(self.cd, 16)
    }

    fn from_dword(dw: u32) -> Self {
        InterruptVectorConfig {
            iv: u16_at(dw, 0),
            cd: bit(dw, 16),
        }
    }
}

/// Write Atomicity Normal (0x0a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WriteAtomicity {
    /// Disable normal: only AWUPF applies.
    pub dn: bool,
}

impl Feature for WriteAtomicity {
    const FID: u8 = fid::WRITE_ATOMICITY;

    fn to_dword(&self) -> u32 {
        flag(self.dn, 0)
    }

    fn from_dword(dw: u32) -> Self {
        WriteAtomicity { dn: bit(dw, 0) }
    }
}

/// Asynchronous Event Configuration (0x0b): which events the controller
/// reports through Asynchronous Event Requests. A bit set per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AsyncEventConfig(pub u32);

impl AsyncEventConfig {
    /// SMART / health critical warnings (one bit per warning, bits 7:0).
    pub const SMART_CRITICAL_WARNINGS: u32 = 0xff;
    /// Namespace Attribute Notices (the changed namespace list).
    pub const NAMESPACE_ATTRIBUTE: u32 = 1 << 8;
    /// Firmware Activation Notices.
    pub const FIRMWARE_ACTIVATION: u32 = 1 << 9;
    /// Telemetry Log Notices.
    pub const TELEMETRY_LOG: u32 = 1 << 10;
    /// Asymmetric Namespace Access Change Notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Predictable Latency Event Aggregate Log Change Notices.
    pub const PREDICTABLE_LATENCY: u32 = 1 << 12;
    /// LBA Status Information Notices.
    pub const LBA_STATUS: u32 = 1 << 13;
    /// Endurance Group Event Aggregate Log Change Notices.
    pub const ENDURANCE_GROUP: u32 = 1 << 14;
    /// Normal NVM Subsystem Shutdown Notices.
    pub const NORMAL_SUBSYSTEM_SHUTDOWN: u32 = 1 << 15;
    /// Zone Descriptor Changed Notices.
    pub const ZONE_DESCRIPTOR_CHANGED: u32 = 1 << 27;
    /// Discovery Log Page Change Notices (discovery controllers).
    pub const DISCOVERY_LOG_CHANGE: u32 = 1 << 31;

    /// Whether every bit of `mask` is set.
    #[must_use]
    pub fn contains(self, mask: u32) -> bool {
        self.0 & mask == mask
    }
}

impl Feature for AsyncEventConfig {
    const FID: u8 = fid::ASYNC_EVENT_CONFIG;

    fn to_dword(&self) -> u32 {
        self.0
    }

    fn from_dword(dw: u32) -> Self {
        AsyncEventConfig(dw)
    }
}

/// Keep Alive Timer (0x0f): the keep alive timeout in milliseconds (0 =
/// disabled). The controller rounds it up to its granularity (KAS, 100 ms
/// units in Identify Controller). NVMe-oF also sets it in Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KeepAliveTimer {
    /// Keep alive timeout (KATO), milliseconds.
    pub kato_ms: u32,
}

impl Feature for KeepAliveTimer {
    const FID: u8 = fid::KEEP_ALIVE_TIMER;

    fn to_dword(&self) -> u32 {
        self.kato_ms
    }

    fn from_dword(dw: u32) -> Self {
        KeepAliveTimer { kato_ms: dw }
    }
}

/// Host Identifier (0x81): dword 11 says whether the data buffer holds an
/// 8-byte or a 16-byte (extended, required by NVMe-oF) host identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HostIdentifier {
    /// Extended (128-bit) host identifier.
    pub exhid: bool,
}

impl Feature for HostIdentifier {
    const FID: u8 = fid::HOST_IDENTIFIER;

    fn to_dword(&self) -> u32 {
        flag(self.exhid, 0)
    }

    fn from_dword(dw: u32) -> Self {
        HostIdentifier { exhid: bit(dw, 0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert_eq!(
            NumberOfQueues::from_counts(4, 4).unwrap().to_dword(),
            0x0003_0003
        );
        let a = NumberOfQueues::from_dword(0x003f_003f);
        assert_eq!((a.sq_count(), a.cq_count()), (64, 64));
        assert_eq!(NumberOfQueues::from_counts(0, 1), None);
        assert_eq!(NumberOfQueues::from_counts(1, 65536), None);
        assert_eq!(NumberOfQueues::from_counts(65535, 1).unwrap().nsqr, 0xfffe);
        assert_eq!(KeepAliveTimer { kato_ms: 10_000 }.to_dword(), 10_000);
        let aen = AsyncEventConfig(
            AsyncEventConfig::NAMESPACE_ATTRIBUTE | AsyncEventConfig::SMART_CRITICAL_WARNINGS,
        );
        assert_eq!(aen.to_dword(), 0x1ff);
        assert!(aen.contains(AsyncEventConfig::NAMESPACE_ATTRIBUTE));
        assert!(!aen.contains(AsyncEventConfig::DISCOVERY_LOG_CHANGE));
        assert_eq!(VolatileWriteCache { wce: true }.to_dword(), 1);
        assert_eq!(
            TemperatureThreshold {
                tmpth: 343,
                tmpsel: 0,
                thsel: 1
            }
            .to_dword(),
            0x0010_0157
        );
        let caps = FeatureCapabilities::from_dword(0b101);
        assert!(caps.saveable && caps.changeable && !caps.namespace_specific);
    }

    fn round_trip<F: Feature + PartialEq + std::fmt::Debug>(v: F) -> Result<(), TestCaseError> {
        prop_assert_eq!(F::from_dword(v.to_dword()), v);
        Ok(())
    }

    proptest! {
        #[test]
        fn values_round_trip(dw: u32, b0: u8, b1: u8, w0: u16, w1: u16, f: bool) {
            round_trip(Arbitration { ab: b0 & 7, lpw: b0, mpw: b1, hpw: b0 ^ b1 })?;
            round_trip(PowerManagement { ps: b0 & 0x1f, wh: b1 & 7 })?;
            round_trip(TemperatureThreshold { tmpth: w0, tmpsel: b0 & 0xf, thsel: b1 & 3 })?;
            round_trip(ErrorRecovery { tler: w0, dulbe: f })?;
            round_trip(VolatileWriteCache { wce: f })?;
            round_trip(NumberOfQueues { nsqr: w0, ncqr: w1 })?;
            round_trip(InterruptCoalescing { thr: b0, time: b1 })?;
            round_trip(InterruptVectorConfig { iv: w1, cd: f })?;
            round_trip(WriteAtomicity { dn: f })?;
            round_trip(AsyncEventConfig(dw))?;
            round_trip(KeepAliveTimer { kato_ms: dw })?;
            round_trip(HostIdentifier { exhid: f })?;
        }
    }
}
