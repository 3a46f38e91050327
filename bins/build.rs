//! Build script of the `remora` command: records which commit it is built from, for the
//! files `remora repro` writes (each experiment's JSON names the binary that measured it, so
//! `--resume` can say where reused points came from).
//!
//! Sets `REMORA_GIT_COMMIT` to `git rev-parse HEAD` of the checkout, with `-dirty` appended
//! when tracked files differ from that commit, or `unknown` when git or the repository is not
//! there (a build from a source package). It runs again when HEAD moves (a commit, a
//! checkout) and when any source file of the workspace changes, so `-dirty` follows edits;
//! it costs two git calls per build, nothing at run time (the value is a constant).

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let bins = Path::new(&manifest);
    let root = bins.parent().unwrap_or(bins);
    // The workspace's sources: an edit makes the commit dirty.
    for dir in [
        "bins/src",
        "src",
        "core/src",
        "poller/src",
        "layouts/src",
        "pmem/src",
    ] {
        let p = root.join(dir);
        if p.exists() {
            println!("cargo::rerun-if-changed={}", p.display());
        }
    }
    let commit = git(root, &["rev-parse", "HEAD"]).filter(|c| !c.is_empty());
    if commit.is_some() {
        // HEAD itself, the branch it names (loose or packed): a commit or a checkout.
        let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
        if let Some(r) = git(root, &["rev-parse", "--symbolic-full-name", "HEAD"])
            .filter(|r| r.starts_with("refs/"))
        {
            watch.push(r);
        }
        for w in watch {
            if let Some(p) = git(root, &["rev-parse", "--git-path", &w]) {
                let p = root.join(p);
                if p.exists() {
                    println!("cargo::rerun-if-changed={}", p.display());
                }
            }
        }
    }
    let value = match commit {
        Some(c) => {
            let dirty = git(root, &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{c}-dirty") } else { c }
        }
        None => "unknown".to_string(),
    };
    println!("cargo::rustc-env=REMORA_GIT_COMMIT={value}");
}
