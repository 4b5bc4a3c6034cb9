//! Generates the libfabric types (`struct fi_info`, `struct fid_*`, the `fi_ops_*` tables,
//! the `FI_*` constants) from the installed headers (Debian's `libfabric-dev`, 1.17) with
//! bindgen, into `$OUT_DIR/fi.rs`: the layouts are the C compiler's (libclang's) for these
//! headers, so no struct is written by hand. `MRC_FI_INCLUDE` names another include
//! directory (one holding `rdma/fabric.h`).
fn main() {
    let inc = std::env::var("MRC_FI_INCLUDE").unwrap_or_else(|_| "/usr/include".into());
    println!("cargo:rerun-if-env-changed=MRC_FI_INCLUDE");
    println!("cargo:rerun-if-changed=src/fi.h");
    println!("cargo:rerun-if-changed={inc}/rdma/fabric.h");
    if !std::path::Path::new(&inc).join("rdma/fabric.h").exists() {
        panic!(
            "mrc-fi needs libfabric's headers: {inc}/rdma/fabric.h is missing \
             (apt-get install libfabric-dev, or MRC_FI_INCLUDE=<dir>); `bash .ci/run` installs them"
        );
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    bindgen::Builder::default()
        .header("src/fi.h")
        .clang_arg(format!("-I{inc}"))
        .allowlist_type("fi_.*|fid.*|fid_t|fi_addr_t")
        .allowlist_var("FI_.*")
        .allowlist_function("fi_getinfo|fi_freeinfo|fi_dupinfo|fi_strerror")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .derive_default(true)
        .generate()
        .expect("bindgen on <rdma/fabric.h> (libfabric-dev and libclang-dev installed?)")
        .write_to_file(out.join("fi.rs"))
        .expect("write fi.rs");
}
