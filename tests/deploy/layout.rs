//! The code layout release builds link with (`proxy/layout/hot.ld`, passed
//! by `proxy/build.rs`): the toolchain's linker takes it, and it gathers
//! the functions it names ahead of the rest of the text. A release build of
//! the proxy takes minutes; a small program linked with the same script
//! shows the same, since the script also names the standard library's
//! functions the proxy runs.

#![cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]

use std::path::Path;
use std::process::Command;

use support::binary::TempDir;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/layout/hot.ld");

#[test]
fn the_toolchains_linker_takes_the_layout_and_gathers_what_it_names() {
    let dir = TempDir::new("layout");
    let source = dir.path().join("main.rs");
    let program = dir.path().join("main");
    std::fs::write(
        &source,
        "fn main() { let n: u64 = std::env::args().count() as u64; println!(\"{}\", format!(\"laid out {n}\")); }",
    )
    .unwrap();
    let link = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["-O", "--edition", "2021", "-C"])
        .arg(format!("link-arg=-Wl,-T,{SCRIPT}"))
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .output()
        .unwrap();
    assert!(
        link.status.success(),
        "{}",
        String::from_utf8_lossy(&link.stderr)
    );

    let run = Command::new(&program).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "laid out 1\n");

    let sections = sections(&program);
    let (hot_addr, hot_size) = sections[".text.hot"];
    let (text_addr, _) = sections[".text"];
    assert!(hot_size > 0, "nothing gathered: {sections:?}");
    assert!(hot_addr < text_addr, "{sections:?}");
}

/// Each section's name, address and size, from the ELF64 section headers.
fn sections(path: &Path) -> std::collections::HashMap<String, (u64, u64)> {
    let elf = std::fs::read(path).unwrap();
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..5], b"\x7fELF\x02", "an ELF64 file");
    let (table, size, count) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c));
    let header = |i: usize| table + i * size;
    let names = u64_at(header(u16_at(0x3e)) + 0x18) as usize;
    (0..count)
        .map(|i| {
            let start = names + u32_at(header(i));
            let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[start..end]).into_owned();
            (name, (u64_at(header(i) + 0x10), u64_at(header(i) + 0x20)))
        })
        .collect()
}
