//! The documentation names only things that exist: every relative Markdown link, every
//! backticked repository path (`fabric/src/engine/watch.rs`, `../examples/src/testbed.rs`)
//! and every backticked module path (`mrc_fabric::engine::watch`) in the repository's
//! Markdown files (README.md, docs/*.md, testbed/README.md, any other tracked `*.md`) must
//! resolve to a file or directory inside this repository.
//!
//! What counts as a repository path: a whitespace-separated word of an inline code span, or
//! of a line in a `sh`/`bash`/untagged fenced block, that starts with `./`, `../` or the name
//! of a top-level directory of the repository (`congestion/`, `docs/`, `.ci/`, ...).
//! Words with placeholders (`<target>`, `*`, `...`, `{a,b}`, `$VAR`, an all-capitals
//! component such as `N` or `FILE`) and build outputs (`target/`, `fuzz/target`,
//! `fuzz/artifacts/`, `fuzz/coverage`) are not checked. A trailing `::item` (a test or
//! function in that file) and `:LINE` are cut off first.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// The repository root: the parent of this crate's directory.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Directories never searched for Markdown files: build outputs and VCS data.
const SKIP_DIRS: &[&str] = &[".git", "target", "corpus", "artifacts", "coverage"];

/// Build outputs a doc may name that a fresh checkout lacks.
const BUILD_OUTPUTS: &[&str] = &["target", "fuzz/target", "fuzz/artifacts", "fuzz/coverage"];

/// Every `*.md` under `dir`, skipping [`SKIP_DIRS`], sorted.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !SKIP_DIRS.contains(&name) {
                markdown_files(&p, out);
            }
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// What a Markdown file refers to, each with its 1-based line.
#[derive(Debug, Default, PartialEq, Eq)]
struct Refs {
    /// `[text](target)` targets that are not URLs or same-page anchors, `#fragment` cut off.
    links: Vec<(usize, String)>,
    /// Backticked words that look like repository paths (see the module docs).
    paths: Vec<(usize, String)>,
    /// Backticked `mrc_crate::module::...` paths, braces expanded.
    modules: Vec<(usize, String)>,
}

/// Cuts the decorations around a word: leading `(`, trailing punctuation, `::item`, `:LINE`.
fn trim_word(word: &str) -> &str {
    let w = word.trim_start_matches(['(', '"', '\'']);
    let w = w.trim_end_matches([',', '.', ';', ')', '"', '\'']);
    let w = w.split("::").next().unwrap_or(w);
    match w.rsplit_once(':') {
        Some((head, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => w.trim_end_matches(':'),
    }
}

/// True when `word` has a placeholder in it and so names no one file.
fn is_placeholder(word: &str) -> bool {
    word.contains(['*', '<', '>', '{', '}', '$', '|', '[', ']', '='])
        || word.contains("...")
        || word.split('/').any(|c| {
            !c.is_empty()
                && !c.contains('.')
                && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
}

/// The repository path `word` names, if it looks like one (`tops`: top-level directories).
fn as_repo_path(word: &str, tops: &BTreeSet<String>) -> Option<String> {
    let w = trim_word(word);
    if is_placeholder(w) || !w.contains('/') {
        return None;
    }
    let first = w.split('/').next().unwrap_or("");
    let looks = w.starts_with("./") || w.starts_with("../") || tops.contains(first);
    looks.then(|| w.to_string())
}

/// Expands `mrc_x::{a, b}` and `mrc_x::a::{b, c}` into one path per item.
fn expand_braces(span: &str) -> Vec<String> {
    match (span.find('{'), span.rfind('}')) {
        (Some(open), Some(close)) if open < close => span[open + 1..close]
            .split(',')
            .map(|item| format!("{}{}", &span[..open], item.trim()))
            .collect(),
        _ => vec![span.to_string()],
    }
}

/// Everything `text` (a Markdown file's contents) refers to.
fn scan(text: &str, tops: &BTreeSet<String>) -> Refs {
    let mut refs = Refs::default();
    // Prose with fenced blocks blanked out, kept line for line so spans over a line
    // break still pair up and line numbers stay right.
    let mut prose = String::new();
    let mut fence: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let trimmed = line.trim_start();
        if let Some(lang) = &fence {
            if trimmed.starts_with("```") {
                fence = None;
            } else if matches!(lang.as_str(), "" | "sh" | "bash") {
                for word in line.split_whitespace() {
                    if word.starts_with('#') {
                        break; // a shell comment
                    }
                    if let Some(p) = as_repo_path(word, tops) {
                        refs.paths.push((lineno, p));
                    }
                }
            }
            prose.push('\n');
            continue;
        }
        if let Some(lang) = trimmed.strip_prefix("```") {
            fence = Some(lang.trim().to_string());
            prose.push('\n');
            continue;
        }
        prose.push_str(line);
        prose.push('\n');
    }
    // Inline code spans: the odd pieces between backticks.
    let mut line = 1;
    for (k, piece) in prose.split('`').enumerate() {
        if k % 2 == 1 {
            for word in piece.split_whitespace() {
                if let Some(p) = as_repo_path(word, tops) {
                    refs.paths.push((line, p));
                }
            }
            let span = piece.trim();
            let module_like = span.starts_with("mrc_")
                && span.contains("::")
                && (!span.contains(' ') || span.contains("::{"))
                && !span.contains(['*', '<', '>', '(']);
            if module_like {
                for m in expand_braces(span) {
                    refs.modules.push((line, m));
                }
            }
        } else {
            // Links live in prose, not in code.
            let mut rest = piece;
            let mut at = line;
            while let Some(pos) = rest.find("](") {
                at += rest[..pos].matches('\n').count();
                let after = &rest[pos + 2..];
                let Some(end) = after.find(')') else { break };
                let target = after[..end].trim();
                let target = target.split('#').next().unwrap_or("");
                if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
                    refs.links.push((at, target.to_string()));
                }
                rest = &after[end..];
            }
        }
        line += piece.matches('\n').count();
    }
    refs
}

/// Resolves `rel` against `base` (a directory inside `root`) without touching the file
/// system; `None` when it climbs out of `root`.
fn resolve(root: &Path, base: &Path, rel: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = base
        .strip_prefix(root)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for c in Path::new(rel).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    let mut p = root.to_path_buf();
    p.extend(parts);
    Some(p)
}

/// The source directory of a crate named in a module path, or `None` when not ours.
fn crate_src(root: &Path, krate: &str) -> Option<PathBuf> {
    let dir = match krate {
        "mrc_congestion" => "congestion",
        "mrc_transport" => "transport",
        "mrc_fabric" => "fabric",
        "mrc_frame" => "fabric/frame",
        "mrc_fabric_sim" => "fabric/sim",
        "mrc_examples" => "examples",
        "mrc_tests" => "tests",
        _ => return None,
    };
    Some(root.join(dir).join("src"))
}

/// Why the module path `path` names nothing, or `None` when it does: every lowercase
/// segment but a last one must be a module file (`seg.rs` or `seg/mod.rs`); a last
/// lowercase segment that is no module is taken as a function, an uppercase one as a type.
fn check_module(root: &Path, path: &str) -> Option<String> {
    let mut segs = path.split("::");
    let krate = segs.next()?;
    let Some(mut dir) = crate_src(root, krate) else {
        return Some(format!("`{krate}` is not a crate of this repository"));
    };
    let segs: Vec<&str> = segs.collect();
    for (i, seg) in segs.iter().enumerate() {
        if seg.is_empty() || seg.starts_with(|c: char| c.is_ascii_uppercase()) {
            return None;
        }
        let file = dir.join(format!("{seg}.rs"));
        let sub = dir.join(seg);
        if file.is_file() || sub.join("mod.rs").is_file() {
            dir = sub;
        } else if i + 1 == segs.len() && i > 0 {
            return None; // a function in the module before it
        } else {
            return Some(format!("no module `{seg}` in {}", dir.display()));
        }
    }
    None
}

/// Every broken reference in every Markdown file of the repository, as `file:line: what`.
fn broken_refs(root: &Path) -> Vec<String> {
    let tops: BTreeSet<String> = std::fs::read_dir(root)
        .expect("read the repository root")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect();
    let mut files = Vec::new();
    markdown_files(root, &mut files);
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a Markdown file");
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let dir = file.parent().expect("a file has a directory");
        let refs = scan(&text, &tops);
        for (line, link) in &refs.links {
            match resolve(root, dir, link) {
                None => broken.push(format!("{shown}:{line}: link {link} leaves the repository")),
                Some(p) if !p.exists() => {
                    broken.push(format!("{shown}:{line}: link {link} names nothing"))
                }
                Some(_) => {}
            }
        }
        for (line, path) in &refs.paths {
            // `../x` and `./x` are relative to the Markdown file; `dir/x` to the root, or to
            // the file's own directory where that holds it (testbed/README.md's `proof.sh`).
            let base = if path.starts_with("./") || path.starts_with("../") {
                dir
            } else {
                root
            };
            let Some(p) = resolve(root, base, path) else {
                broken.push(format!("{shown}:{line}: `{path}` leaves the repository"));
                continue;
            };
            let rel = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            let built = BUILD_OUTPUTS
                .iter()
                .any(|b| rel == *b || rel.starts_with(&format!("{b}/")));
            if !built && !p.exists() {
                broken.push(format!("{shown}:{line}: `{path}` does not exist"));
            }
        }
        for (line, m) in &refs.modules {
            if let Some(why) = check_module(root, m) {
                broken.push(format!("{shown}:{line}: `{m}`: {why}"));
            }
        }
    }
    broken
}

fn tops() -> BTreeSet<String> {
    ["docs", "fabric", "examples", ".ci"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn every_link_and_backticked_path_in_the_docs_exists() {
    let broken = broken_refs(&repo_root());
    assert!(
        broken.is_empty(),
        "the docs name {} thing(s) that do not exist:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_scan_finds_links_paths_and_modules_and_skips_placeholders() {
    let text = "\
See [WIRE](docs/WIRE.md#bth), [site](https://example.invalid/x) and [here](#top).
Run `fabric/wireshark/mrc.lua`, `examples/tests/soak.rs::soak_test`, `docs/WIRE.md:12`
and `fuzz/artifacts/<target>/`, `fabric/src/*.rs`, `docs/FILE`, `.ci/run`, `a/b`.
The map is `mrc_transport::recv::{window, msgs}` and `mrc_fabric::engine::watch` (not `mrc_*::`); a span
over a line break: `--flag
docs/ARCHITECTURE.md`.
```sh
bash .ci/run examples/x.toml   # docs/not-checked.md
```
```text
docs/not-checked-either.md
```
";
    let refs = scan(text, &tops());
    assert_eq!(refs.links, vec![(1, "docs/WIRE.md".to_string())]);
    let paths: Vec<(usize, &str)> = refs.paths.iter().map(|(l, p)| (*l, p.as_str())).collect();
    assert_eq!(
        paths,
        vec![
            (8, ".ci/run"),
            (8, "examples/x.toml"),
            (2, "fabric/wireshark/mrc.lua"),
            (2, "examples/tests/soak.rs"),
            (2, "docs/WIRE.md"),
            (3, ".ci/run"),
            (5, "docs/ARCHITECTURE.md"),
        ]
    );
    let modules: Vec<(usize, &str)> = refs.modules.iter().map(|(l, m)| (*l, m.as_str())).collect();
    assert_eq!(
        modules,
        vec![
            (4, "mrc_transport::recv::window"),
            (4, "mrc_transport::recv::msgs"),
            (4, "mrc_fabric::engine::watch"),
        ]
    );
}

#[test]
fn a_path_out_of_the_repository_or_to_no_file_is_reported() {
    let root = repo_root();
    let docs = root.join("docs");
    // The design brief ARCHITECTURE.md once pointed at lies outside the repository.
    assert_eq!(resolve(&root, &docs, "../../shared/DESIGN.md"), None);
    assert_eq!(
        resolve(&root, &docs, "../fabric/src/lib.rs"),
        Some(root.join("fabric/src/lib.rs"))
    );
    assert_eq!(check_module(&root, "mrc_fabric::engine::watch"), None);
    assert_eq!(check_module(&root, "mrc_tests::transfer::run"), None);
    assert_eq!(check_module(&root, "mrc_congestion::CcKind"), None);
    assert_eq!(
        check_module(&root, "mrc_fabric::no_such_module::x"),
        Some(format!(
            "no module `no_such_module` in {}",
            root.join("fabric/src").display()
        ))
    );
    assert_eq!(
        check_module(&root, "mrc_nothing::x"),
        Some("`mrc_nothing` is not a crate of this repository".to_string())
    );
}
