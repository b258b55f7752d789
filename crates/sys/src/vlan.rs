//! The outer VLAN tag a packet socket does not see in the frame, put back where it was.
//!
//! On receive the kernel moves a frame's outer 802.1Q (TPID 0x8100) or 802.1ad (0x88a8) tag
//! out of the frame into packet metadata before any packet socket sees it
//! (net/core/dev.c, `__netif_receive_skb_core` → `skb_vlan_untag`; or the NIC does it with
//! `rx-vlan-offload`). A forwarder that sent the bytes it read would send the frame untagged,
//! into the wrong VLAN, and a QinQ frame with only its inner tag. packet(7) gives the tag
//! back: with `PACKET_AUXDATA` as a `struct tpacket_auxdata` control message
//! (`tp_vlan_tci`, `tp_vlan_tpid`, `TP_STATUS_VLAN_VALID`, `TP_STATUS_VLAN_TPID_VALID`),
//! and in the `tpacket2_hdr`/`tpacket3_hdr` of an mmap'ed ring (net/packet/af_packet.c,
//! `tpacket_rcv`, `prb_fill_vlan_info`). Every port of this crate writes the tag back into
//! the frame at byte 12 (IEEE 802.1Q §9: after the two MAC addresses), so the frame a data
//! plane classifies and forwards is the frame that was on the wire. AF_XDP sees frames
//! before the kernel untags them, so the `xdp` port needs nothing here.
//!
//! Cost: nothing for an untagged frame; a tagged one moves its bytes after the MAC
//! addresses 4 bytes on (one `memmove` of at most a slot).

/// `include/uapi/linux/if_packet.h`.
pub const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// `include/uapi/linux/if_packet.h`.
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
/// 802.1Q's tag protocol identifier, the TPID when the kernel does not report one.
pub const TPID_8021Q: u16 = 0x8100;
/// Bytes of one tag (TPID and TCI).
pub const TAG_LEN: usize = 4;
/// Where the tag goes: after destination and source MAC addresses.
const TAG_AT: usize = 12;

/// A tag the kernel took out of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// Tag protocol identifier: 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub tpid: u16,
    /// Priority, drop eligibility and VLAN id.
    pub tci: u16,
}

impl VlanTag {
    /// The tag packet(7) reports with status word `status` and fields `tci`, `tpid`; `None`
    /// when the frame carried none (`TP_STATUS_VLAN_VALID` clear). A TCI of 0 is a real tag
    /// (priority tagged), so only the status bit decides.
    #[inline]
    pub fn from_status(status: u32, tci: u16, tpid: u16) -> Option<VlanTag> {
        if status & TP_STATUS_VLAN_VALID == 0 {
            return None;
        }
        let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 && tpid != 0 {
            tpid
        } else {
            TPID_8021Q
        };
        Some(VlanTag { tpid, tci })
    }

    fn bytes(self) -> [u8; TAG_LEN] {
        let [a, b] = self.tpid.to_be_bytes();
        let [c, d] = self.tci.to_be_bytes();
        [a, b, c, d]
    }
}

/// Put `tag` back into the `len`-byte frame at the start of `buf`; returns the frame's new
/// length, or `None` (buffer unchanged) when the frame is shorter than its MAC addresses or
/// the tagged frame does not fit in `buf`.
#[inline]
pub fn insert_in_place(buf: &mut [u8], len: usize, tag: VlanTag) -> Option<usize> {
    if len < TAG_AT || len + TAG_LEN > buf.len() {
        return None;
    }
    buf.copy_within(TAG_AT..len, TAG_AT + TAG_LEN);
    buf[TAG_AT..TAG_AT + TAG_LEN].copy_from_slice(&tag.bytes());
    Some(len + TAG_LEN)
}

/// Copy `frame` to the start of `buf` with `tag` (if any) put back; returns the length
/// written, or `None` when it does not fit (or a tagged frame is shorter than its MAC
/// addresses).
#[inline]
pub fn copy_with_tag(buf: &mut [u8], frame: &[u8], tag: Option<VlanTag>) -> Option<usize> {
    let Some(tag) = tag else {
        buf.get_mut(..frame.len())?.copy_from_slice(frame);
        return Some(frame.len());
    };
    let len = frame.len() + TAG_LEN;
    if frame.len() < TAG_AT || len > buf.len() {
        return None;
    }
    buf[..TAG_AT].copy_from_slice(&frame[..TAG_AT]);
    buf[TAG_AT..TAG_AT + TAG_LEN].copy_from_slice(&tag.bytes());
    buf[TAG_AT + TAG_LEN..len].copy_from_slice(&frame[TAG_AT..]);
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 16] = [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0x08, 0x00, 0x45, 0x00];

    #[test]
    fn a_reported_tag_goes_back_after_the_mac_addresses_with_its_tpid() {
        let tag = VlanTag::from_status(
            TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID,
            0x2005,
            0x88a8,
        )
        .unwrap();
        let mut buf = [0u8; 32];
        buf[..16].copy_from_slice(&FRAME);
        assert_eq!(insert_in_place(&mut buf, 16, tag), Some(20));
        let want = [
            1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0x88, 0xa8, 0x20, 0x05, 0x08, 0x00, 0x45, 0x00,
        ];
        assert_eq!(&buf[..20], &want);
        let mut copy = [0u8; 32];
        assert_eq!(copy_with_tag(&mut copy, &FRAME, Some(tag)), Some(20));
        assert_eq!(&copy[..20], &want);
    }

    #[test]
    fn the_status_word_decides_and_the_tpid_defaults_to_8021q() {
        assert_eq!(VlanTag::from_status(0, 5, 0x8100), None);
        assert_eq!(
            VlanTag::from_status(TP_STATUS_VLAN_VALID, 0, 0),
            Some(VlanTag {
                tpid: TPID_8021Q,
                tci: 0
            })
        );
    }

    #[test]
    fn a_frame_that_would_not_fit_is_left_alone() {
        let tag = VlanTag {
            tpid: TPID_8021Q,
            tci: 5,
        };
        let mut buf = FRAME;
        assert_eq!(insert_in_place(&mut buf, 16, tag), None);
        assert_eq!(buf, FRAME);
        assert_eq!(insert_in_place(&mut [0u8; 32], 10, tag), None);
        assert_eq!(copy_with_tag(&mut [0u8; 19], &FRAME, Some(tag)), None);
        assert_eq!(copy_with_tag(&mut [0u8; 16], &FRAME, None), Some(16));
    }
}
