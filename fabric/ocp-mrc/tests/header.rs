//! `include/mrcx.h` is cbindgen's output for `src/ext.rs` with `cbindgen.toml`: this test
//! regenerates it and fails if the committed header differs (`MRCX_BLESS=1` rewrites it).
//! It also checks that the extension declares no name of OCP's `mrc.h`: every function,
//! struct and constant of `mrcx.h` is prefixed `mrc_x_` / `MRC_X_`.

use std::path::Path;

fn generate() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cfg = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(cfg)
        .with_src(dir.join("src/ext.rs"))
        .generate()
        .expect("cbindgen parses src/ext.rs")
        .write(&mut out);
    String::from_utf8(out).expect("UTF-8 header")
}

#[test]
fn the_committed_header_is_cbindgens_output() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mrcx.h");
    let fresh = generate();
    if std::env::var_os("MRCX_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/mrcx.h");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/mrcx.h differs from cbindgen's output for src/ext.rs; run \
         MRCX_BLESS=1 cargo test -p mrc-ocp --test header and commit it"
    );
}

/// Identifiers declared by a C header: function names (before `(` on a declaration
/// line), `struct` tags and `#define`d names.
fn declared(h: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut f, mut s, mut d) = (Vec::new(), Vec::new(), Vec::new());
    let ident = |t: &str| {
        t.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<String>()
    };
    for l in h.lines() {
        let t = l.trim_start();
        if let Some(r) = t.strip_prefix("#define ") {
            d.push(ident(r));
        } else if let Some(r) = t.strip_prefix("struct ") {
            let n = ident(r);
            let after = r[n.len()..].trim_start();
            if after.starts_with('{') || after.starts_with(';') {
                s.push(n);
            }
        }
        if let Some(i) = t
            .find("mrc_x_")
            .filter(|_| !t.starts_with('*') && t.contains('('))
        {
            let n = ident(&t[i..]);
            if t[i + n.len()..].starts_with('(') {
                f.push(n);
            }
        }
    }
    (f, s, d)
}

#[test]
fn the_extension_declares_only_prefixed_names_and_every_call() {
    let h = generate();
    let (funcs, structs, defines) = declared(&h);
    assert_eq!(
        funcs,
        [
            "mrc_x_open",
            "mrc_x_close_context",
            "mrc_x_udp_port",
            "mrc_x_listen",
            "mrc_x_accept",
            "mrc_x_close_listener",
            "mrc_x_connect",
            "mrc_x_connect_poll",
            "mrc_x_destroy_qp",
            "mrc_x_reg_mr",
            "mrc_x_dereg_mr",
            "mrc_x_post_send",
            "mrc_x_post_recv",
            "mrc_x_progress",
            "mrc_x_wait",
            "mrc_x_poll_cq",
            "mrc_x_qp_transport",
            "mrc_x_qp_evs",
            "mrc_x_last_error",
        ]
    );
    let mut sorted = structs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted,
        [
            "mrc_x_context",
            "mrc_x_context_attr",
            "mrc_x_ev_count",
            "mrc_x_mr",
            "mrc_x_recv_wr",
            "mrc_x_send_wr",
            "mrc_x_sge",
            "mrc_x_transport_info",
            "mrc_x_wc",
        ]
    );
    for d in &defines {
        assert!(
            d == "MRCX_H" || d.starts_with("MRC_X_"),
            "unprefixed #define {d}"
        );
    }
    assert_eq!(
        defines.len(),
        1 + 1 + 3 + 4 + 5 + 1 + 7 + 4 + 4,
        "{defines:?}"
    );
    // No name of OCP's mrc.h is redeclared.
    let mrc_h =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/mrc.h"))
            .expect("include/mrc.h");
    for n in funcs.iter().chain(&structs).chain(&defines) {
        assert!(!mrc_h.contains(n.as_str()), "{n} is also in mrc.h");
    }
    assert!(!h.contains("infiniband"), "mrcx.h must not need libibverbs");
}
