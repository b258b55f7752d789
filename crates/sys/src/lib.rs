//! # netsched-sys — the OS layer of the data planes
//!
//! Every system call the data planes (`netsched-link`, `netsched-vswitch`, `netsched-nfq`,
//! `netsched-balance`), the testbed and the lab make goes through this crate, each behind a
//! safe wrapper; **it holds every `unsafe` block of the workspace's libraries**, each with a
//! `// SAFETY:` comment saying why the call is sound. Every other library crate is
//! `#![forbid(unsafe_code)]`, and `crates/cli/tests/layering.rs` checks both.
//!
//! By concern:
//! - [`clock`]: `CLOCK_MONOTONIC` and thread CPU time in nanoseconds, clock ticks;
//! - [`epoll`]: readiness waits — [`Epoll`] (`epoll_pwait2`), `ppoll`, `poll`, [`EventFd`];
//! - [`socket`]: socket options, interface index, offload state, namespace cookie,
//!   `TCP_NODELAY`, `shutdown`, `SO_PEERCRED`;
//! - [`packet`]: the `AF_PACKET` socket ([`PacketFd`]) and its slot-addressed batches;
//! - [`port`]: frame ports over it ([`Port`], the [`FramePort`] trait);
//! - [`frame_pool`]: the [`FramePool`] ports fill, whose slots are lent to other threads to
//!   read in place;
//! - [`tpacket`]: `TPACKET_V2` receive and transmit rings of an `AF_PACKET` socket (mmap);
//!   [`tpacket_v3`]: a `TPACKET_V3` receive ring (blocks);
//! - [`ring_port`]: the ring port ([`RingPort`]) on either, a [`FramePort`];
//! - [`bpf`], [`bpf_object`]: raw `bpf(2)` calls (XSKMAP, XDP program load, BPF link) and
//!   the reader of the XDP program's object file (crates/sys/bpf/redirect.c, built by build.rs);
//! - [`xsk`]: an AF_XDP socket with its UMEM and rings; [`xdp_port`]: the `xdp` port on it;
//! - [`any_port`]: the port backend chosen at start ([`PortBackend`]: `auto`, `xdp`,
//!   `tpacket`, `tpacket_v3`, `packet`) and [`AnyPort`], any port behind one type;
//! - [`vlan`]: the outer VLAN tag the kernel takes out of a received frame, put back;
//! - [`mmsg`]: `sendmmsg`/`recvmmsg` on any socket (load generators, netlink batches);
//! - [`netlink`]: raw netlink sockets ([`NetlinkSocket`]);
//! - [`tap`]: TAP devices;
//! - [`pipe`]: pipes and `splice` for zero-copy relaying;
//! - [`thread`]: namespace entry, CPU affinity, timer slack, nice value, thread id;
//! - [`process`]: uid, signals, signal flags, the open-file limit;
//! - [`fs`]: private temporary folders (`mkdtemp`);
//! - [`iface_watch`]: a watch, off the packet path, that the interfaces a data plane is bound
//!   to keep their index.
//!
//! **The testbed's system calls live here too** (namespace entry, CPU pinning, signals to
//! process groups, `mkdtemp`, `SO_PEERCRED`): they are the same kind of call as the data
//! planes' (the link engine and the switch enter namespaces and pin CPUs as much as the
//! testbed does), and one crate holding all `unsafe` makes the rule "`unsafe` only in
//! `netsched-sys`" simple to state and to check. `netsched-testbed` keeps its namespace and
//! process logic and re-exports the calls it always offered.
//!
//! This crate depends on no other netsched crate (it is a leaf): nanoseconds are plain
//! [`Nanos`] (`u64`, the same type as `netsched_core::Nanos`). Small wrappers on hot paths are
//! `#[inline]`, so a data plane calling them from its own crate pays no extra call.

pub mod any_port;
pub mod bpf;
pub mod bpf_object;
pub mod clock;
pub mod epoll;
pub mod frame_pool;
pub mod fs;
pub mod iface_watch;
pub mod mmsg;
pub mod netlink;
pub mod packet;
pub mod pipe;
pub mod port;
pub mod process;
pub mod ring_port;
pub mod socket;
pub mod tap;
pub mod thread;
pub mod tpacket;
pub mod tpacket_v3;
pub mod vlan;
pub mod xdp_port;
pub mod xsk;

pub use any_port::{AnyPort, PortBackend, PortOptions, UnknownBackend};
pub use clock::{now_ns, thread_cpu_ns};
pub use epoll::{poll, poll_in, Epoll, EventFd};
pub use netlink::NetlinkSocket;
pub use packet::PacketFd;
pub use pipe::Pipe;
pub use port::{FramePool, FramePort, Lent, Offloads, PoolReader, Port, Rx, BATCH, SLOT};
pub use ring_port::{RingConfig, RingPort};
pub use socket::{ifindex, PeerCred};
pub use tap::Tap;
pub use thread::set_timer_slack;
pub use xdp_port::XdpPort;
pub use xsk::XdpStats;

/// Nanoseconds (`netsched_core::Nanos` is the same `u64`).
pub type Nanos = u64;
/// Nanoseconds per second.
pub const SEC: Nanos = 1_000_000_000;
