//! Reads the one program of a small BPF object file (ELF64, little-endian, as
//! `clang -target bpf -c` writes it): the instructions of a named section and the instructions
//! that load the address of a named map symbol (relocations `R_BPF_64_64` in `.rel<section>`),
//! so the loader ([`crate::bpf`]) can point them at a map it created. No `unsafe`: the file is
//! parsed as bytes, every offset bounds-checked, a malformed file an error naming what is wrong.
//!
//! Formats: the System V ABI's ELF-64 object file format (section headers, `SHT_REL`,
//! `SHT_SYMTAB`), and the kernel's Documentation/bpf/llvm_reloc.rst for the BPF relocation
//! type (`R_BPF_64_64` = 1 on a 16-byte `ld_imm64`).

use std::io;

/// `SHT_SYMTAB`.
const SHT_SYMTAB: u32 = 2;
/// `SHT_REL`.
const SHT_REL: u32 = 9;
/// `R_BPF_64_64` (llvm_reloc.rst).
const R_BPF_64_64: u32 = 1;
/// `BPF_LD | BPF_IMM | BPF_DW`: the first half of a 16-byte `ld_imm64`.
const LD_IMM64: u8 = 0x18;
/// Bytes per BPF instruction.
pub const INSN: usize = 8;
/// Most bytes of an object this reader accepts (the program is a few hundred).
pub const MAX_OBJECT: usize = 1 << 20;

/// A program read from an object: its instructions and where each map symbol is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfProgram {
    /// The section's bytes: whole 8-byte instructions.
    pub insns: Vec<u8>,
    /// Indexes (in instructions) of the `ld_imm64`s that load the map symbol's address.
    pub map_loads: Vec<usize>,
    /// The `license` section's string (without its NUL).
    pub license: String,
}

fn bad(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("BPF object: {what}"))
}

fn bytes<'a>(b: &'a [u8], at: usize, n: usize, what: &str) -> io::Result<&'a [u8]> {
    at.checked_add(n)
        .and_then(|end| b.get(at..end))
        .ok_or_else(|| bad(format_args!("{what} at {at}+{n} lies outside the file")))
}
fn u16_at(b: &[u8], at: usize, what: &str) -> io::Result<u16> {
    let s = bytes(b, at, 2, what)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}
fn u32_at(b: &[u8], at: usize, what: &str) -> io::Result<u32> {
    let s = bytes(b, at, 4, what)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}
fn u64_at(b: &[u8], at: usize, what: &str) -> io::Result<u64> {
    let s = bytes(b, at, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}
fn usize_at(b: &[u8], at: usize, what: &str) -> io::Result<usize> {
    usize::try_from(u64_at(b, at, what)?).map_err(|_| bad(format_args!("{what}: too large")))
}

/// One section header's fields this reader uses.
#[derive(Debug, Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
    info: u32,
}

fn sections(b: &[u8]) -> io::Result<Vec<Section>> {
    if b.len() > MAX_OBJECT {
        return Err(bad(format_args!(
            "{} bytes, more than {MAX_OBJECT}",
            b.len()
        )));
    }
    if bytes(b, 0, 6, "ELF header")? != b"\x7fELF\x02\x01" {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let shoff = usize_at(b, 0x28, "e_shoff")?;
    let shentsize = u16_at(b, 0x3a, "e_shentsize")? as usize;
    let shnum = u16_at(b, 0x3c, "e_shnum")? as usize;
    if shentsize < 64 {
        return Err(bad(format_args!("section header size {shentsize} < 64")));
    }
    (0..shnum)
        .map(|i| {
            let h = shoff + i * shentsize;
            let s = Section {
                name: u32_at(b, h, "sh_name")?,
                kind: u32_at(b, h + 4, "sh_type")?,
                offset: usize_at(b, h + 24, "sh_offset")?,
                size: usize_at(b, h + 32, "sh_size")?,
                link: u32_at(b, h + 40, "sh_link")?,
                info: u32_at(b, h + 44, "sh_info")?,
            };
            Ok(s)
        })
        .collect()
}

/// The NUL-terminated string at `at` of string table `tab`.
fn string(b: &[u8], tab: &Section, at: u32) -> io::Result<String> {
    let t = bytes(b, tab.offset, tab.size, "string table")?;
    let s = t
        .get(at as usize..)
        .ok_or_else(|| bad(format_args!("string {at} outside its table")))?;
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    Ok(String::from_utf8_lossy(&s[..end]).into_owned())
}

/// Read section `prog_section` of object `b` and the loads of symbol `map_symbol` in it.
pub fn read_program(b: &[u8], prog_section: &str, map_symbol: &str) -> io::Result<BpfProgram> {
    let secs = sections(b)?;
    let shstrndx = u16_at(b, 0x3e, "e_shstrndx")? as usize;
    let names = *secs
        .get(shstrndx)
        .ok_or_else(|| bad("no section-name table"))?;
    let name_of = |s: &Section| string(b, &names, s.name);
    let mut prog = None;
    let mut license = String::new();
    for (i, s) in secs.iter().enumerate() {
        match name_of(s)?.as_str() {
            n if n == prog_section => prog = Some((i, *s)),
            "license" => {
                let l = bytes(b, s.offset, s.size, "license")?;
                let end = l.iter().position(|&c| c == 0).unwrap_or(l.len());
                license = String::from_utf8_lossy(&l[..end]).into_owned();
            }
            _ => {}
        }
    }
    let (index, sec) = prog.ok_or_else(|| bad(format_args!("no section `{prog_section}`")))?;
    if sec.size == 0 || sec.size % INSN != 0 {
        return Err(bad(format_args!(
            "section `{prog_section}`: {} bytes, not whole instructions",
            sec.size
        )));
    }
    let insns = bytes(b, sec.offset, sec.size, "program")?.to_vec();
    let mut map_loads = Vec::new();
    for rel in secs
        .iter()
        .filter(|s| s.kind == SHT_REL && s.info as usize == index)
    {
        let symtab = *secs
            .get(rel.link as usize)
            .filter(|s| s.kind == SHT_SYMTAB)
            .ok_or_else(|| bad("relocations without a symbol table"))?;
        let strtab = *secs
            .get(symtab.link as usize)
            .ok_or_else(|| bad("symbol table without strings"))?;
        for r in 0..rel.size / 16 {
            let at = rel.offset + r * 16;
            let offset = usize_at(b, at, "r_offset")?;
            let info = u64_at(b, at + 8, "r_info")?;
            let (sym, kind) = ((info >> 32) as usize, info as u32);
            let name = string(b, &strtab, u32_at(b, symtab.offset + sym * 24, "st_name")?)?;
            if name != map_symbol {
                return Err(bad(format_args!(
                    "relocation against unknown symbol `{name}`"
                )));
            }
            let insn = offset / INSN;
            if kind != R_BPF_64_64
                || offset % INSN != 0
                || insns.get(insn * INSN) != Some(&LD_IMM64)
                || (insn + 2) * INSN > insns.len()
            {
                return Err(bad(format_args!(
                    "relocation at {offset} (type {kind}) is not a 64-bit load of `{name}`"
                )));
            }
            map_loads.push(insn);
        }
    }
    Ok(BpfProgram {
        insns,
        map_loads,
        license,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_truncated_objects_are_refused_by_name() {
        let e = read_program(b"hello", "xdp", "xsks")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ELF header"), "{e}");
        let mut elf = b"\x7fELF\x02\x01".to_vec();
        elf.resize(0x40, 0);
        elf[0x28] = 0xff; // section headers past the end
        elf[0x3a] = 64;
        elf[0x3c] = 1;
        let e = read_program(&elf, "xdp", "xsks").unwrap_err().to_string();
        assert!(e.contains("outside the file"), "{e}");
    }
}
