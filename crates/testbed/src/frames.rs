//! Raw frames for tests of the data planes that forward whole frames (link, vswitch,
//! filter): a sender that writes crafted frames on an interface of a test namespace, and a
//! capture that keeps every frame carrying a marker, whole, as the receiving port hands it
//! over (the outer VLAN tag the kernel took out put back: `netsched_sys::vlan`).

use crate::NetnsThread;
use anyhow::Result;
use netsched_sys::port::{FramePool, Port, Rx, BATCH};
use std::time::Duration;

/// The marker [`marked_frame`] puts in its payload and [`capture`] looks for.
pub const MARKER: &[u8; 4] = b"NSVL";
/// Local experimental EtherType (IEEE 802): no stack above the port reads it.
pub const ETHERTYPE_EXPERIMENTAL: u16 = 0x88b5;

/// A 64-byte broadcast frame of EtherType [`ETHERTYPE_EXPERIMENTAL`] carrying [`MARKER`] and
/// `id`, with VLAN tags `(tpid, tci)` after the MAC addresses, outermost first.
pub fn marked_frame(id: u32, tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0x5e, 0x01]);
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ETHERTYPE_EXPERIMENTAL.to_be_bytes());
    f.extend_from_slice(MARKER);
    f.extend_from_slice(&id.to_be_bytes());
    f.resize(64 + 4 * tags.len(), b'.');
    f
}

/// `frame` with VLAN tags `(tpid, tci)` inserted after its MAC addresses, outermost first.
pub fn with_tags(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    for &(tpid, tci) in tags {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&tci.to_be_bytes());
    }
    out.extend_from_slice(&frame[12..]);
    out
}

/// Send `frames` from namespace `ns` on `dev`, `pause` after each.
pub fn send(ns: &str, dev: &str, frames: Vec<Vec<u8>>, pause: Duration) -> Result<()> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    std::thread::spawn(move || -> Result<()> {
        crate::enter_netns(&ns)?;
        let port = Port::open(&dev)?;
        for f in &frames {
            port.send_frame(f)?;
            std::thread::sleep(pause);
        }
        Ok(())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("sender panicked"))?
}

/// Keep every frame holding `marker` that arrives in namespace `ns` on `dev`, whole, until
/// stopped.
pub fn capture(ns: &str, dev: &str, marker: &'static [u8]) -> Result<NetnsThread<Vec<Vec<u8>>>> {
    let dev = dev.to_string();
    NetnsThread::spawn(
        "capture",
        format!("cap-{ns}"),
        ns,
        move || Ok(Port::open(&dev)?),
        move |port, stop| {
            let mut pool = FramePool::new(256);
            let mut ev = [Rx::Oversize { len: 0 }; BATCH];
            let mut got = Vec::new();
            while !stop() {
                let (_, n) = port.recv(&mut pool, &mut ev);
                for e in &ev[..n] {
                    if let Rx::Frame { slot, len } = *e {
                        let f = pool.data(slot, len);
                        if f.windows(marker.len()).any(|w| w == marker) {
                            got.push(f.to_vec());
                        }
                        pool.release(slot);
                    }
                }
                if n == 0 {
                    let _ = netsched_sys::epoll::poll_in(&[(port.raw_fd(), true)], 5_000_000);
                }
            }
            Ok(got)
        },
    )
}

/// Tagged frames a forwarder must carry unchanged: 802.1Q VLAN 5, a priority tag (VID 0,
/// PCP 3), 802.1ad VLAN 100 over 802.1Q VLAN 5, and three tags.
pub fn tagged_set() -> Vec<Vec<u8>> {
    const Q: u16 = 0x8100;
    const AD: u16 = 0x88a8;
    vec![
        marked_frame(0, &[]),
        marked_frame(1, &[(Q, 5)]),
        marked_frame(2, &[(Q, 0x6000)]),
        marked_frame(3, &[(AD, 100), (Q, 5)]),
        marked_frame(4, &[(AD, 100), (Q, 5), (Q, 6)]),
    ]
}
