//! Compiles the C half of the module (shim/gconv.c) against the system's
//! <gconv.h>, so the step structures have the layout of the glibc this
//! module is built for, and links it into the cdylib.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let obj = out.join("gconv_shim.o");
    let lib = out.join("libcutf8_gconv_shim.a");
    println!("cargo:rerun-if-changed=shim/gconv.c");
    println!("cargo:rerun-if-env-changed=CC");
    let status = Command::new(&cc)
        .args([
            "-c",
            "-fPIC",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-std=gnu11",
        ])
        .arg("shim/gconv.c")
        .arg("-o")
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}`: {e} (install gcc and libc6-dev, or set CC)")
        });
    assert!(status.success(), "compiling shim/gconv.c failed: it needs <gconv.h> (Debian/Ubuntu: apt-get install libc6-dev)");
    let _ = std::fs::remove_file(&lib);
    let status = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .arg(&obj)
        .status()
        .expect("cannot run ar (binutils)");
    assert!(status.success(), "ar failed on {}", obj.display());
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=cutf8_gconv_shim");
}
