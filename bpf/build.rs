//! Compiles `src/capsule.bpf.c` into a BPF ELF object with clang; `lib.rs` embeds it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "src/capsule.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("capsule.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // <asm/types.h>, which <linux/types.h> includes, lives in the multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "riscv64" => "riscv64-linux-gnu",
        other => panic!("capsule-bpf: no multiarch include directory known for {other}"),
    };
    let status = Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", src, "-o"])
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "capsule-bpf: cannot run {clang} to build the XDP program ({e}); \
                 install clang and libbpf-dev (scripts/deps.sh does)"
            )
        });
    assert!(
        status.success(),
        "capsule-bpf: {clang} failed to compile {src} ({status})"
    );
}
