//! Typed errors of the classifiers: [`CidrError`] (text that is not a CIDR),
//! [`PortRangeError`], and [`ClassifierConfigError`] (a CIDR table or rule list that cannot be
//! built; names the entry and field, e.g. `rules[1].dst_port`).

use super::cidr::Cidr;
use core::fmt;
use std::net::IpAddr;

/// Why `text` is not a CIDR. Every variant keeps the text as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CidrError {
    /// The part before `/` is not an address.
    NotAnAddress { text: String, addr: String },
    /// The part after `/` is not a number `0..=max`.
    BadPrefixLength { text: String, len: String, max: u8 },
    /// The prefix is longer than the family allows (32 or 128).
    PrefixTooLong {
        text: String,
        prefix_len: u8,
        max: u8,
    },
    /// Bits are set beyond the prefix; `network` is what was probably meant.
    HostBitsSet {
        text: String,
        network: IpAddr,
        prefix_len: u8,
    },
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CidrError::NotAnAddress { text, addr } => write!(
                f,
                "bad CIDR '{text}': '{addr}' is not an IPv4 or IPv6 address"
            ),
            CidrError::BadPrefixLength { text, len, max } => write!(
                f,
                "bad CIDR '{text}': prefix length '{len}' is not a number 0..={max}"
            ),
            CidrError::PrefixTooLong {
                text,
                prefix_len,
                max,
            } => write!(
                f,
                "bad CIDR '{text}': prefix length {prefix_len} is longer than {max}"
            ),
            CidrError::HostBitsSet {
                text,
                network,
                prefix_len,
            } => write!(
                f,
                "bad CIDR '{text}': host bits set beyond /{prefix_len} (the network is \
                 {network}/{prefix_len})"
            ),
        }
    }
}

impl std::error::Error for CidrError {}

/// `text` is not a port or a port range `low-high` with `low <= high`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRangeError {
    pub text: String,
}

impl fmt::Display for PortRangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' is not a port or a port range low-high with low <= high",
            self.text
        )
    }
}

impl std::error::Error for PortRangeError {}

/// Why a classifier configuration cannot be built; `field` names the entry and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassifierConfigError {
    Cidr {
        field: String,
        error: CidrError,
    },
    PortRange {
        field: String,
        error: PortRangeError,
    },
    /// Not `tcp`, `udp`, `icmp`, `icmpv6` or a protocol number 0-255.
    Protocol {
        field: String,
        text: String,
    },
    /// The same CIDR twice in a table.
    DuplicateCidr {
        field: String,
        cidr: Cidr,
    },
}

impl ClassifierConfigError {
    /// The entry and field the error is about.
    pub fn field(&self) -> &str {
        match self {
            ClassifierConfigError::Cidr { field, .. }
            | ClassifierConfigError::PortRange { field, .. }
            | ClassifierConfigError::Protocol { field, .. }
            | ClassifierConfigError::DuplicateCidr { field, .. } => field,
        }
    }
}

impl fmt::Display for ClassifierConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassifierConfigError::Cidr { field, error } => write!(f, "{field}: {error}"),
            ClassifierConfigError::PortRange { field, error } => write!(f, "{field}: {error}"),
            ClassifierConfigError::Protocol { field, text } => write!(
                f,
                "{field}: '{text}' is not tcp, udp, icmp, icmpv6 or a protocol number 0-255"
            ),
            ClassifierConfigError::DuplicateCidr { field, cidr } => {
                write!(f, "{field}: {cidr} is listed twice")
            }
        }
    }
}

impl std::error::Error for ClassifierConfigError {}
