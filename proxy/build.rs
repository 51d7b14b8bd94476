//! Lays out the release binary's code: the functions the proxy's request
//! path runs go first, together (`layout/hot.ld`, written from profiles by
//! `tools/code_layout.sh`; docs/speed.md has the figures).
//!
//! A page fault on a binary's code maps the whole 64 KiB window around it,
//! so a request path spread over the text keeps most of the text resident;
//! gathered, it keeps a few windows. The script only orders sections: a
//! function it names that is not in the build costs nothing, and the
//! binary's behaviour is the same without it.
//!
//! Passed only where it was tested: release builds for x86-64 Linux (glibc)
//! with the toolchain's linker (rust-lld, or GNU ld: both read `INSERT`
//! scripts), not when another linker is configured.
//! `REFUSAL_GUARD_CODE_LAYOUT=off` turns it off.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=layout/hot.ld");
    println!("cargo:rerun-if-env-changed=REFUSAL_GUARD_CODE_LAYOUT");
    if !layout_applies() {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = format!("{dir}/layout/hot.ld");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{script}");
    println!("cargo:rustc-link-arg-examples=-Wl,-T,{script}");
}

fn layout_applies() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let turned_off = matches!(
        var("REFUSAL_GUARD_CODE_LAYOUT").as_str(),
        "off" | "0" | "false"
    );
    let release = var("PROFILE") == "release";
    let target = var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu";
    // A configured linker (`target.<triple>.linker`, `-C linker=`) may be
    // anything; of the linkers chosen with `-fuse-ld`, lld and GNU ld read
    // `INSERT` scripts, mold, gold and wild do not.
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let other_linker = flags.split('\x1f').any(|flag| {
        let fuse_ld = flag.contains("fuse-ld=")
            && !flag.ends_with("fuse-ld=lld")
            && !flag.ends_with("fuse-ld=bfd");
        fuse_ld || flag.starts_with("linker=") || flag.starts_with("-Clinker=")
    });
    let own_linker = env::var_os("RUSTC_LINKER").is_some() || other_linker;
    release && target && !turned_off && !own_linker
}
