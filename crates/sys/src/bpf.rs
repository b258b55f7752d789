//! Raw `bpf(2)` calls for the `xdp` port backend (bpf(2); the kernel's
//! `include/uapi/linux/bpf.h` for each command's attribute layout): create an XSKMAP, set
//! one of its entries, load an XDP program, and attach it to an interface with a BPF link
//! (`BPF_LINK_CREATE`, attach type `BPF_XDP`). A BPF link detaches its program when its last
//! descriptor closes, so dropping [`BpfFd`] of the link — at a normal stop, on Ctrl-C, or when
//! the process dies — takes the program off the interface (Documentation/bpf/, "BPF link").
//!
//! Constants not in the `libc` crate are copied by value from `include/uapi/linux/bpf.h` and
//! `include/uapi/linux/if_link.h`.

use crate::bpf_object::{BpfProgram, INSN};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
/// `enum bpf_map_type`.
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `enum bpf_prog_type`.
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`.
const BPF_XDP: u32 = 37;
/// `src_reg` of an `ld_imm64` whose immediate is a map descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `include/uapi/linux/if_link.h`: native (driver) mode.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// Bytes of verifier log kept when a load is refused.
const LOG_BYTES: usize = 16 * 1024;

/// A descriptor the kernel gave for a BPF object (map, program or link), closed on drop.
#[derive(Debug)]
pub struct BpfFd(OwnedFd);

impl AsRawFd for BpfFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `bpf(cmd, attr, sizeof attr)` returning a new descriptor.
fn bpf_fd<T>(cmd: i32, attr: &mut T) -> io::Result<BpfFd> {
    // SAFETY: `attr` is a live, fully initialised `#[repr(C)]` prefix of `union bpf_attr` for
    // `cmd`, and its size is passed (the kernel accepts a shorter attribute and reads no
    // further); a non-negative result is a descriptor we now own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(BpfFd(unsafe { OwnedFd::from_raw_fd(r as RawFd) }))
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// An XSKMAP of `entries` slots (key: queue index, value: AF_XDP socket).
pub fn create_xskmap(entries: u32) -> io::Result<BpfFd> {
    let mut name = [0u8; 16];
    name[..4].copy_from_slice(b"xsks");
    let mut a = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: name,
        ..MapCreate::default()
    };
    bpf_fd(BPF_MAP_CREATE, &mut a).map_err(|e| io::Error::new(e.kind(), format!("XSKMAP: {e}")))
}

#[repr(C)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Set `map[key] = value` (both 4 bytes).
pub fn map_update(map: &BpfFd, key: u32, value: u32) -> io::Result<()> {
    let mut a = MapUpdate {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0,
    };
    // SAFETY: `a` is the `BPF_MAP_UPDATE_ELEM` attribute; its key and value point at live
    // u32s of the map's key and value size for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_ELEM,
            &mut a as *mut MapUpdate as *mut libc::c_void,
            std::mem::size_of::<MapUpdate>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// Load `prog` as an XDP program, its map loads pointed at `map`. A refusal carries the
/// verifier's last log line.
pub fn load_xdp(prog: &BpfProgram, map: &BpfFd) -> io::Result<BpfFd> {
    let mut insns = prog.insns.clone();
    for &i in &prog.map_loads {
        let at = i * INSN;
        insns[at + 1] = (insns[at + 1] & 0x0f) | (BPF_PSEUDO_MAP_FD << 4);
        insns[at + 4..at + 8].copy_from_slice(&(map.as_raw_fd() as u32).to_le_bytes());
    }
    let license = std::ffi::CString::new(prog.license.as_str())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "license with a NUL byte"))?;
    let mut log = vec![0u8; LOG_BYTES];
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(b"netsched");
    let mut a = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: (insns.len() / INSN) as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: LOG_BYTES as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_XDP,
        ..ProgLoad::default()
    };
    // `insns`, `license` and `log` outlive the call.
    bpf_fd(BPF_PROG_LOAD, &mut a).map_err(|e| {
        let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        io::Error::new(e.kind(), format!("loading the XDP program: {e} {last}"))
    })
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// Attach `prog` to interface `ifindex` with `flags` (`XDP_FLAGS_*`); the program stays
/// attached while the returned link descriptor is open.
pub fn attach_xdp(prog: &BpfFd, ifindex: u32, flags: u32) -> io::Result<BpfFd> {
    let mut a = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    bpf_fd(BPF_LINK_CREATE, &mut a)
}
