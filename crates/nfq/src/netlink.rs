//! A minimal nfnetlink_queue client over a raw netlink socket ([`NetlinkSocket`] of
//! `netsched_sys`, which makes the system calls; this file builds and parses the messages).
//!
//! Why not the `nfq` crate: it hides the socket's file descriptor, so the daemon could neither
//! `poll` it together with its control socket, nor size its receive buffer with
//! `SO_RCVBUFFORCE`, nor batch verdicts into one `sendmsg`. This file speaks the protocol
//! directly; the message layouts come from the kernel's UAPI headers
//! `include/uapi/linux/netfilter/nfnetlink_queue.h` and `nfnetlink.h`, and the kernel side is
//! `net/netfilter/nfnetlink_queue.c` (`nfqnl_recv_config`, `nfqnl_recv_verdict`,
//! `__nfqnl_enqueue_packet`).
//!
//! - Receive: `recvmmsg` of up to [`RECV_BATCH`] datagrams per call (the kernel unicasts one
//!   packet per datagram); each is parsed into a [`PacketMsg`] that owns only the packet id,
//!   the hook and the first `copy_range` bytes of the packet (headers), never the payload.
//! - Verdicts: several `NFQNL_MSG_VERDICT` messages packed into one datagram (the kernel's
//!   `netlink_rcv_skb` walks every message of a datagram), so a burst of releases costs one
//!   `send`.
//! - Overload: with `NFQA_CFG_F_FAIL_OPEN` the kernel accepts a packet it cannot queue (queue
//!   full or socket buffer full) instead of dropping it; the socket then reports `ENOBUFS` on
//!   the next `recv` (unless `NETLINK_NO_ENOBUFS`), which [`NfQueue::recv_batch`] counts.
//!
//! Cost: two system calls per batch; no allocation per packet beyond the header copy.

use netsched_sys::NetlinkSocket;
use std::fmt;
use std::io;
use std::os::fd::RawFd;

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_PACKET: u8 = 2;
/// `NFQA_CFG_F_FAIL_OPEN` (nfnetlink_queue.h).
pub const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
/// `NFQA_CFG_F_GSO` (nfnetlink_queue.h, Linux ≥ 3.10): hand us a GSO packet whole. Without
/// it the kernel segments each GSO skb before queueing (`nfqnl_enqueue_packet`), so one rule
/// match became several queued packets and `received` exceeded the rules' counters (#10.8).
/// We only read headers and never modify a packet, so a whole GSO packet is fine.
pub const NFQA_CFG_F_GSO: u32 = 4;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NF_ACCEPT: u32 = 1;
/// Netfilter hook numbers (`enum nf_inet_hooks`, include/uapi/linux/netfilter.h).
pub const NF_INET_LOCAL_IN: u8 = 1;
pub const NF_INET_LOCAL_OUT: u8 = 3;

/// Datagrams taken per `recvmmsg`.
pub const RECV_BATCH: usize = 64;
/// Bytes of each packet copied to user space: enough for IPv6 + extension headers + TCP with
/// options; the payload itself is never needed (the verdict re-injects the kernel's skb).
pub const COPY_RANGE: usize = 160;
const SLOT: usize = 512;

/// One queued packet, as the daemon needs it.
#[derive(Debug, Clone)]
pub struct PacketMsg {
    pub id: u32,
    pub hook: u8,
    /// The first [`COPY_RANGE`] bytes of the IP packet.
    pub head: Vec<u8>,
}

/// An open, bound queue.
pub struct NfQueue {
    sock: NetlinkSocket,
    queue_num: u16,
    seq: u32,
    /// [`RECV_BATCH`] slots of [`SLOT`] bytes, one datagram each.
    bufs: Vec<u8>,
    out: Vec<u8>,
    pending_verdicts: usize,
    /// ENOBUFS reports: the socket buffer overflowed, packets skipped the daemon (fail-open).
    pub enobufs: u64,
    /// Packet messages received since the queue was opened (never reset).
    pub received: u64,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn put_nlmsg(buf: &mut Vec<u8>, msg_type: u16, flags: u16, seq: u32, res_id: u16) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by finish_nlmsg
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg_type).to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    // struct nfgenmsg: family, version (NFNETLINK_V0), res_id (big endian)
    buf.push(libc::AF_UNSPEC as u8);
    buf.push(0);
    buf.extend_from_slice(&res_id.to_be_bytes());
    start
}

fn put_attr(buf: &mut Vec<u8>, attr_type: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&attr_type.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(buf.len() + align4(len) - len, 0);
}

fn finish_nlmsg(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// What failed while opening, configuring or using the queue's netlink socket: the step (the
/// text names it) and the system's error.
#[derive(Debug)]
pub enum QueueError {
    /// No netfilter netlink socket (not root, or `nfnetlink_queue` not loaded).
    Socket(io::Error),
    /// Binding the netlink socket.
    NetlinkBind(io::Error),
    /// Binding queue `queue` (another process may hold it).
    BindQueue { queue: u16, source: io::Error },
    /// A socket option, a queue setting, a receive or a send: `step` names it
    /// (`SO_RCVBUF`, `setting the copy range`, `netlink recv`, `sending verdicts`, …).
    Step {
        step: &'static str,
        source: io::Error,
    },
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::Socket(e) => write!(
                f,
                "cannot open a netfilter netlink socket: {e} (root? nfnetlink_queue module?)"
            ),
            QueueError::NetlinkBind(e) => write!(f, "netlink bind: {e}"),
            QueueError::BindQueue { queue, source } => write!(
                f,
                "binding queue {queue} (is another process bound to it?): {source}"
            ),
            QueueError::Step { step, source } => write!(f, "{step}: {source}"),
        }
    }
}

// No `source()`: the text already holds the inner error's (a `{:#}` chain would repeat it).
impl std::error::Error for QueueError {}

/// `map_err` for one step.
fn step(step: &'static str) -> impl FnOnce(io::Error) -> QueueError {
    move |source| QueueError::Step { step, source }
}

impl NfQueue {
    /// Open a socket, bind `queue_num`, copy headers only, set the kernel queue length, the
    /// receive buffer and fail-open. Errors name the step that failed.
    pub fn open(
        queue_num: u16,
        queue_maxlen: u32,
        rcvbuf_bytes: usize,
    ) -> Result<Self, QueueError> {
        let sock = NetlinkSocket::open(NETLINK_NETFILTER).map_err(|(step, e)| match step {
            "bind" => QueueError::NetlinkBind(e),
            _ => QueueError::Socket(e),
        })?;
        let mut q = NfQueue {
            sock,
            queue_num,
            seq: 1,
            bufs: vec![0u8; SLOT * RECV_BATCH],
            out: Vec::with_capacity(64 * 1024),
            pending_verdicts: 0,
            enobufs: 0,
            received: 0,
        };
        q.set_rcvbuf(rcvbuf_bytes)?;
        // ENOBUFS reporting on (it is on by default; say so explicitly: NETLINK_NO_ENOBUFS = 0).
        q.setsockopt(libc::SOL_NETLINK, libc::NETLINK_NO_ENOBUFS, 0)
            .map_err(step("NETLINK_NO_ENOBUFS=0"))?;
        q.config_cmd(NFQNL_CFG_CMD_BIND)
            .map_err(|source| QueueError::BindQueue {
                queue: queue_num,
                source,
            })?;
        // struct nfqnl_msg_config_params { __be32 copy_range; __u8 copy_mode; } __packed
        let mut params = (COPY_RANGE as u32).to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        q.config_attrs(&[(NFQA_CFG_PARAMS, params)])
            .map_err(step("setting the copy range"))?;
        q.config_attrs(&[(NFQA_CFG_QUEUE_MAXLEN, queue_maxlen.to_be_bytes().to_vec())])
            .map_err(step("setting the kernel queue length"))?;
        let flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
        q.config_attrs(&[
            (NFQA_CFG_FLAGS, flags.to_be_bytes().to_vec()),
            (NFQA_CFG_MASK, flags.to_be_bytes().to_vec()),
        ])
        .map_err(step("setting NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO"))?;
        Ok(q)
    }

    pub fn fd(&self) -> RawFd {
        self.sock.raw()
    }

    fn setsockopt(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        val: libc::c_int,
    ) -> io::Result<()> {
        self.sock.set_int(level, name, val)
    }

    /// The receive buffer: `SO_RCVBUFFORCE` (root, ignores `net.core.rmem_max`), falling back
    /// to `SO_RCVBUF`. Returns the size the kernel reports (it doubles the request).
    pub fn set_rcvbuf(&mut self, bytes: usize) -> Result<usize, QueueError> {
        let v = bytes.min(i32::MAX as usize) as libc::c_int;
        if self
            .setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)
            .is_err()
        {
            self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, v)
                .map_err(step("SO_RCVBUF"))?;
        }
        Ok(self.rcvbuf())
    }

    pub fn rcvbuf(&self) -> usize {
        self.sock
            .get_int(libc::SOL_SOCKET, libc::SO_RCVBUF)
            .unwrap_or(0)
            .max(0) as usize
    }

    fn send_raw(&self, buf: &[u8]) -> std::io::Result<()> {
        self.sock.send_to_kernel(buf)
    }

    fn config_cmd(&mut self, cmd: u8) -> io::Result<()> {
        // struct nfqnl_msg_config_cmd { __u8 command; __u8 _pad; __be16 pf; }
        self.config_attrs(&[(NFQA_CFG_CMD, vec![cmd, 0, 0, 0])])
    }

    /// Send a config message with `NLM_F_ACK` and wait for the kernel's answer (skipping any
    /// packet messages that arrive meanwhile — none can before the first bind succeeds).
    fn config_attrs(&mut self, attrs: &[(u16, Vec<u8>)]) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut buf = Vec::with_capacity(64);
        let start = put_nlmsg(
            &mut buf,
            NFQNL_MSG_CONFIG,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            self.queue_num,
        );
        for (t, d) in attrs {
            put_attr(&mut buf, *t, d);
        }
        finish_nlmsg(&mut buf, start);
        self.send_raw(&buf)?;
        let mut rbuf = vec![0u8; 8192];
        for _ in 0..64 {
            let n = match self.sock.recv(&mut rbuf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.enobufs += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut off = 0;
            while off + 16 <= n {
                let len = u32::from_ne_bytes(rbuf[off..off + 4].try_into().unwrap()) as usize;
                let typ = u16::from_ne_bytes(rbuf[off + 4..off + 6].try_into().unwrap());
                let rseq = u32::from_ne_bytes(rbuf[off + 8..off + 12].try_into().unwrap());
                if len < 16 || off + len > n {
                    break;
                }
                if typ == NLMSG_ERROR && rseq == seq && len >= 20 {
                    let err = i32::from_ne_bytes(rbuf[off + 16..off + 20].try_into().unwrap());
                    if err == 0 {
                        return Ok(());
                    }
                    return Err(io::Error::from_raw_os_error(-err));
                }
                off += align4(len);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no answer from the kernel to a queue config message",
        ))
    }

    /// Receive up to [`RECV_BATCH`] packets without blocking (call after `poll` says readable).
    /// Appends to `out`; returns how many were appended. ENOBUFS is counted, not an error.
    pub fn recv_batch(&mut self, out: &mut Vec<PacketMsg>) -> Result<usize, QueueError> {
        let mut lens = [0usize; RECV_BATCH];
        let n = match self.sock.recv_batch(&mut self.bufs, SLOT, &mut lens) {
            Ok(n) => n,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                    Some(libc::ENOBUFS) => {
                        self.enobufs += 1;
                        Ok(0)
                    }
                    _ => Err(QueueError::Step {
                        step: "netlink recv",
                        source: e,
                    }),
                };
            }
        };
        let before = out.len();
        for (i, &len) in lens.iter().enumerate().take(n) {
            let len = len.min(SLOT);
            parse_datagram(&self.bufs[i * SLOT..][..len], out);
        }
        self.received += (out.len() - before) as u64;
        Ok(out.len() - before)
    }

    /// Queue an ACCEPT verdict for packet `id`; sent by [`NfQueue::flush`].
    pub fn accept(&mut self, id: u32) {
        let start = put_nlmsg(
            &mut self.out,
            NFQNL_MSG_VERDICT,
            NLM_F_REQUEST,
            0,
            self.queue_num,
        );
        // struct nfqnl_msg_verdict_hdr { __be32 verdict; __be32 id; }
        let mut vh = [0u8; 8];
        vh[..4].copy_from_slice(&NF_ACCEPT.to_be_bytes());
        vh[4..].copy_from_slice(&id.to_be_bytes());
        put_attr(&mut self.out, NFQA_VERDICT_HDR, &vh);
        finish_nlmsg(&mut self.out, start);
        self.pending_verdicts += 1;
        if self.out.len() > 60 * 1024 {
            let _ = self.flush();
        }
    }

    /// Send the queued verdicts (one datagram). Returns how many were sent.
    pub fn flush(&mut self) -> Result<usize, QueueError> {
        if self.out.is_empty() {
            return Ok(0);
        }
        let n = self.pending_verdicts;
        let res = self.send_raw(&self.out);
        self.out.clear();
        self.pending_verdicts = 0;
        res.map_err(step("sending verdicts"))?;
        Ok(n)
    }

    /// Unbind (the kernel then accepts, because of `--queue-bypass`, whatever arrives).
    pub fn unbind(&mut self) -> Result<(), QueueError> {
        self.config_cmd(NFQNL_CFG_CMD_UNBIND)
            .map_err(step("unbinding the queue"))
    }
}

impl Drop for NfQueue {
    fn drop(&mut self) {
        let _ = self.flush();
        // The socket closes after this, with the struct's fields: the kernel then drops our
        // queue instance (nfqnl_rcv_nl_event), re-injecting nothing: callers verdict held
        // packets first.
    }
}

/// Parse one datagram: packet messages become [`PacketMsg`]; errors/acks are ignored. Public
/// for the fuzz targets (crates/fuzz).
#[doc(hidden)]
pub fn parse_datagram(buf: &[u8], out: &mut Vec<PacketMsg>) {
    let mut off = 0;
    while off + 20 <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        let typ = u16::from_ne_bytes(buf[off + 4..off + 6].try_into().unwrap());
        if len < 16 || off + len > buf.len() {
            // The datagram was truncated to SLOT bytes; parse what fits.
            if typ == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
                if let Some(p) = parse_packet(&buf[off + 20..]) {
                    out.push(p);
                }
            }
            return;
        }
        // A packet message too short for its nfgenmsg (20 bytes with the netlink header)
        // carries nothing to read.
        if typ != NLMSG_ERROR
            && typ != NLMSG_DONE
            && typ == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
            && len >= 20
        {
            if let Some(p) = parse_packet(&buf[off + 20..off + len]) {
                out.push(p);
            }
        }
        off += align4(len);
    }
}

/// Attributes of a packet message (after nlmsghdr + nfgenmsg).
fn parse_packet(attrs: &[u8]) -> Option<PacketMsg> {
    let mut id = None;
    let mut hook = 0u8;
    let mut head = Vec::new();
    let mut off = 0;
    while off + 4 <= attrs.len() {
        let alen = u16::from_ne_bytes([attrs[off], attrs[off + 1]]) as usize;
        let atype = u16::from_ne_bytes([attrs[off + 2], attrs[off + 3]]) & 0x3fff;
        if alen < 4 {
            break;
        }
        let end = (off + alen).min(attrs.len());
        let data = &attrs[off + 4..end];
        match atype {
            // struct nfqnl_msg_packet_hdr { __be32 packet_id; __be16 hw_protocol; __u8 hook; }
            NFQA_PACKET_HDR if data.len() >= 7 => {
                id = Some(u32::from_be_bytes([data[0], data[1], data[2], data[3]]));
                hook = data[6];
            }
            NFQA_PAYLOAD => head = data.to_vec(),
            _ => {}
        }
        off += align4(alen);
    }
    id.map(|id| PacketMsg { id, hook, head })
}

/// The kernel's per-queue counters from /proc/net/netfilter/nfnetlink_queue (this netns):
/// (waiting now, dropped for a full queue, dropped for a full socket).
pub fn kernel_queue_counters(queue: u16) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue").ok()?;
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // queue_number portid queue_total copy_mode copy_range queue_dropped user_dropped id_seq 1
        if f.len() >= 7 && f[0] == queue as u64 {
            return Some((f[2], f[5], f[6]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet_datagram(id: u32, hook: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        let s = put_nlmsg(&mut b, NFQNL_MSG_PACKET, 0, 0, 7);
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&0x0800u16.to_be_bytes());
        hdr.push(hook);
        put_attr(&mut b, NFQA_PACKET_HDR, &hdr);
        put_attr(&mut b, NFQA_PAYLOAD, payload);
        finish_nlmsg(&mut b, s);
        b
    }

    #[test]
    fn netlink_packet_message_round_trips() {
        let d = packet_datagram(0xdead_beef, NF_INET_LOCAL_OUT, &[0x45, 1, 2, 3, 4]);
        let mut out = Vec::new();
        parse_datagram(&d, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].id, 0xdead_beef);
        assert_eq!(out[0].hook, NF_INET_LOCAL_OUT);
        assert_eq!(out[0].head, vec![0x45, 1, 2, 3, 4]);
    }

    #[test]
    fn netlink_garbage_never_panics() {
        let mut rng = netsched_core::rng::SplitMix64::new(7);
        for _ in 0..2000 {
            let n = (rng.next_u64() % 200) as usize;
            let b: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            let mut out = Vec::new();
            parse_datagram(&b, &mut out);
        }
    }

    /// Found writing the fuzz target `nfq_netlink` (its reproducer:
    /// crates/fuzz/corpus/nfq_netlink/crash-short-packet-message):
    /// a packet message whose length (16..20) covers its netlink header but not its nfgenmsg
    /// sliced `buf[off + 20..off + len]` backwards and panicked.
    #[test]
    fn a_packet_message_shorter_than_its_headers_is_skipped() {
        for len in 16u32..20 {
            let mut b = Vec::new();
            b.extend_from_slice(&len.to_ne_bytes());
            b.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET).to_ne_bytes());
            b.extend_from_slice(&[0; 10]);
            b.extend_from_slice(&packet_datagram(5, NF_INET_LOCAL_OUT, &[0x45])[..]);
            let mut out = Vec::new();
            parse_datagram(&b, &mut out);
            assert!(out.iter().all(|p| p.head.len() <= b.len()), "len {len}");
        }
    }

    #[test]
    fn netlink_verdict_message_layout() {
        let mut b = Vec::new();
        let s = put_nlmsg(&mut b, NFQNL_MSG_VERDICT, NLM_F_REQUEST, 0, 5);
        put_attr(&mut b, NFQA_VERDICT_HDR, &[0, 0, 0, 1, 0, 0, 0, 9]);
        finish_nlmsg(&mut b, s);
        assert_eq!(b.len(), 16 + 4 + 12);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes(b[4..6].try_into().unwrap()), 0x301);
        assert_eq!(&b[18..20], &5u16.to_be_bytes());
    }
}
