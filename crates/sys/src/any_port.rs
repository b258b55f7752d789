//! The port backend a data plane runs on, chosen at start: `packet` ([`Port`], `AF_PACKET`
//! with `recvmmsg`/`sendmmsg`), `tpacket` ([`RingPort`], an mmap'ed `TPACKET_V2` RX ring),
//! `tpacket_v3` (the same port on a `TPACKET_V3` RX ring of blocks),
//! `xdp` ([`XdpPort`], an AF_XDP socket fed by an XDP program), or `auto` (`xdp`, else the
//! ring, else `packet`, each step with the reason the kernel or the build gave). [`AnyPort`] is
//! any of them, behind the one [`FramePort`] contract, so the link engine and the host switch
//! need no second code path. Selection costs one `match` per batch.

use crate::port::{FramePool, FramePort, Offloads, Port, Rx};
use crate::ring_port::{RingConfig, RingPort};
use crate::xdp_port::XdpPort;
use crate::xsk::XdpStats;
use std::io;
use std::os::fd::RawFd;

/// Which port implementation to open (`port = "auto" | "xdp" | "tpacket" | "packet"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PortBackend {
    /// `xdp`, else `tpacket`, else `packet` (the reasons are returned by [`AnyPort::open`]).
    #[default]
    Auto,
    Xdp,
    /// The `TPACKET_V2` ring (frame by frame).
    Tpacket,
    /// The `TPACKET_V3` ring (block by block; receive only, `sendmmsg` to transmit).
    #[serde(rename = "tpacket_v3")]
    TpacketV3,
    Packet,
}

impl PortBackend {
    pub const NAMES: &'static str = "auto, xdp, tpacket, tpacket_v3, packet";

    pub fn name(self) -> &'static str {
        match self {
            PortBackend::Auto => "auto",
            PortBackend::Xdp => "xdp",
            PortBackend::Tpacket => "tpacket",
            PortBackend::TpacketV3 => "tpacket_v3",
            PortBackend::Packet => "packet",
        }
    }
}

/// A port backend name that is none of [`PortBackend::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownBackend(pub String);

impl std::fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "port backend `{}`: unknown (one of {})",
            self.0,
            PortBackend::NAMES
        )
    }
}

impl std::error::Error for UnknownBackend {}

impl std::str::FromStr for PortBackend {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, UnknownBackend> {
        match s {
            "auto" => Ok(PortBackend::Auto),
            "xdp" => Ok(PortBackend::Xdp),
            "tpacket" => Ok(PortBackend::Tpacket),
            "tpacket_v3" => Ok(PortBackend::TpacketV3),
            // The old spelling, read for one release (docs/cli.md, "Renames").
            "tpacket-v3" => {
                tracing::warn!("port backend `tpacket-v3` is spelled `tpacket_v3`");
                Ok(PortBackend::TpacketV3)
            }
            "packet" => Ok(PortBackend::Packet),
            _ => Err(UnknownBackend(s.to_string())),
        }
    }
}

impl std::fmt::Display for PortBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to open a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortOptions {
    pub backend: PortBackend,
    /// Ring sizes (`tpacket`, `xdp`, `auto`; for `xdp` the UMEM's receive and transmit
    /// chunks, rounded up to powers of two, `tx_frames = 0` meaning
    /// [`crate::xdp_port::DEFAULT_TX_FRAMES`]).
    pub ring: RingConfig,
}

/// An open port of any backend.
#[derive(Debug)]
pub enum AnyPort {
    Packet(Port),
    Ring(RingPort),
    /// Boxed: the socket, its four rings and the BPF objects make it several times the others.
    Xdp(Box<XdpPort>),
}

/// A missing interface or privilege fails the same way on every backend: `auto` says it once
/// instead of falling back.
fn fatal(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
    )
}

impl AnyPort {
    /// Open `dev` as `opts` says. With `auto`, a refused `xdp` falls back to the ring and a
    /// refused ring to `packet`; the second value then holds the reasons, for the caller to
    /// print.
    pub fn open(dev: &str, opts: &PortOptions) -> io::Result<(Self, Option<String>)> {
        match opts.backend {
            PortBackend::Packet => Ok((AnyPort::Packet(Port::open(dev)?), None)),
            PortBackend::Tpacket => Ok((AnyPort::Ring(RingPort::open(dev, opts.ring)?), None)),
            PortBackend::TpacketV3 => Ok((AnyPort::Ring(RingPort::open_v3(dev, opts.ring)?), None)),
            PortBackend::Xdp => Ok((AnyPort::Xdp(Box::new(XdpPort::open(dev, opts.ring)?)), None)),
            PortBackend::Auto => {
                let xdp = match XdpPort::open(dev, opts.ring) {
                    Ok(x) => return Ok((AnyPort::Xdp(Box::new(x)), None)),
                    Err(e) if fatal(&e) => return Err(e),
                    Err(e) => e,
                };
                match RingPort::open(dev, opts.ring) {
                    Ok(r) => Ok((
                        AnyPort::Ring(r),
                        Some(format!("{dev}: xdp refused ({xdp}); using tpacket")),
                    )),
                    Err(e) if fatal(&e) => Err(e),
                    Err(e) => Ok((
                        AnyPort::Packet(Port::open(dev)?),
                        Some(format!(
                            "{dev}: xdp refused ({xdp}); tpacket ring refused ({e}); using packet"
                        )),
                    )),
                }
            }
        }
    }

    /// The backend in use: `xdp`, `tpacket`, `tpacket_v3` or `packet` (never `auto`).
    pub fn backend(&self) -> PortBackend {
        match self {
            AnyPort::Packet(_) => PortBackend::Packet,
            AnyPort::Ring(r) if r.is_v3() => PortBackend::TpacketV3,
            AnyPort::Ring(_) => PortBackend::Tpacket,
            AnyPort::Xdp(_) => PortBackend::Xdp,
        }
    }

    /// Bytes of ring memory this port mapped (0 for `packet`; UMEM and rings for `xdp`).
    pub fn ring_bytes(&self) -> usize {
        match self {
            AnyPort::Packet(_) => 0,
            AnyPort::Ring(r) => r.ring_bytes(),
            AnyPort::Xdp(x) => x.ring_bytes(),
        }
    }

    /// The AF_XDP socket's drop and error counters since open (zeros on other backends).
    pub fn xdp_stats(&self) -> XdpStats {
        match self {
            AnyPort::Xdp(x) => x.stats(),
            _ => XdpStats::default(),
        }
    }

    /// Print the offload warning (see [`Offloads::warning`]) for a CLI named `tool`.
    pub fn warn_if_offloads(&self, tool: &str) {
        if let Some(w) = self.offloads().warning(tool, self.name()) {
            eprintln!("{w}");
        }
    }
}

impl FramePort for AnyPort {
    fn name(&self) -> &str {
        match self {
            AnyPort::Packet(p) => p.name(),
            AnyPort::Ring(r) => FramePort::name(r),
            AnyPort::Xdp(x) => FramePort::name(x.as_ref()),
        }
    }
    fn raw_fd(&self) -> RawFd {
        match self {
            AnyPort::Packet(p) => p.raw_fd(),
            AnyPort::Ring(r) => FramePort::raw_fd(r),
            AnyPort::Xdp(x) => FramePort::raw_fd(x.as_ref()),
        }
    }
    #[inline]
    fn recv(&self, pool: &mut FramePool, out: &mut [Rx]) -> (usize, usize) {
        match self {
            AnyPort::Packet(p) => p.recv(pool, out),
            AnyPort::Ring(r) => r.recv(pool, out),
            AnyPort::Xdp(x) => x.recv(pool, out),
        }
    }
    #[inline]
    fn rx_stamp(&self, event: usize) -> Option<u64> {
        match self {
            AnyPort::Ring(r) => r.rx_stamp(event),
            AnyPort::Packet(_) | AnyPort::Xdp(_) => None,
        }
    }
    #[inline]
    fn send(&self, pool: &FramePool, frames: &[(u32, u32)]) -> io::Result<usize> {
        match self {
            AnyPort::Packet(p) => p.send(pool, frames),
            AnyPort::Ring(r) => r.send(pool, frames),
            AnyPort::Xdp(x) => x.send(pool, frames),
        }
    }
    fn take_kernel_drops(&self) -> u64 {
        match self {
            AnyPort::Packet(p) => p.take_kernel_drops(),
            AnyPort::Ring(r) => r.take_kernel_drops(),
            AnyPort::Xdp(x) => x.take_kernel_drops(),
        }
    }
    fn offloads(&self) -> Offloads {
        match self {
            AnyPort::Packet(p) => p.offloads(),
            AnyPort::Ring(r) => FramePort::offloads(r),
            AnyPort::Xdp(x) => FramePort::offloads(x.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_parse_both_ways_and_an_unknown_one_is_named() {
        for b in [
            PortBackend::Auto,
            PortBackend::Xdp,
            PortBackend::Tpacket,
            PortBackend::TpacketV3,
            PortBackend::Packet,
        ] {
            assert_eq!(b.name().parse::<PortBackend>(), Ok(b));
        }
        // The old spelling, for one release.
        assert_eq!(
            "tpacket-v3".parse::<PortBackend>(),
            Ok(PortBackend::TpacketV3)
        );
        let e = "xdpp".parse::<PortBackend>().unwrap_err().to_string();
        assert!(
            e.contains("`xdpp`") && e.contains("auto, xdp, tpacket, tpacket_v3, packet"),
            "{e}"
        );
    }

    #[test]
    fn every_backend_refuses_an_unknown_interface_by_name() {
        for backend in [
            PortBackend::Auto,
            PortBackend::Xdp,
            PortBackend::Tpacket,
            PortBackend::TpacketV3,
            PortBackend::Packet,
        ] {
            let opts = PortOptions {
                backend,
                ..PortOptions::default()
            };
            let e = AnyPort::open("nsx-no-such0", &opts)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("`nsx-no-such0` does not exist"),
                "{backend}: {e}"
            );
        }
    }
}
