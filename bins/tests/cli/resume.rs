//! `remora repro --resume`: a run stopped part-way goes on from the experiment files it
//! wrote, and its report is the one a run in one go writes (apart from the list of what was
//! reused); a file that is not provably the same experiment is measured again.
use super::*;
use std::path::Path;

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("remora-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `remora repro erda --scale tiny` (9 experiments, about 2 s of CPU) into `d`, with
/// `resume` (e.g. "--resume") if given: its stderr.
fn repro_erda(d: &Path, resume: Option<&'static str>) -> String {
    let mut args = vec!["repro", "erda", "--scale", "tiny", "--quiet", "--out"];
    args.push(d.to_str().unwrap());
    args.extend(resume);
    let out = remora(&args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    err
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `text` with the `--resume` or `--resume-any-build` of its command (the command as run)
/// taken out.
fn without_resume_flag(text: String) -> String {
    ["--resume", "--resume-any-build"]
        .iter()
        .fold(text, |t, f| {
            t.replacen(&format!(" {f} --quiet"), " --quiet", 1)
        })
}

/// report.md without its `--resume` paragraph, report.json without its `reused` list, both
/// with the `--resume` of their command taken out.
fn without_reused(d: &Path) -> (String, String) {
    let md = without_resume_flag(read(d.join("report.md")));
    let md = match md.find("**Resumed** (`--resume`)") {
        Some(i) => {
            let end = i + md[i..].find("\n\n").expect("the paragraph ends") + 2;
            format!("{}{}", &md[..i], &md[end..])
        }
        None => md,
    };
    let json = without_resume_flag(read(d.join("report.json")));
    let json = match json.find(",\n  \"reused\": [") {
        Some(i) => format!("{}\n}}\n", &json[..i]),
        None => json,
    };
    (md, json)
}

/// The experiments `report.json` lists as reused.
fn reused(d: &Path) -> Vec<String> {
    let r: serde_json::Value = serde_json::from_str(&read(d.join("report.json"))).unwrap();
    r["reused"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["what"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The points of an experiment file.
fn points(p: PathBuf) -> Vec<serde_json::Value> {
    serde_json::from_str(&read(p)).unwrap()
}

#[test]
fn a_resumed_repro_reports_what_a_run_in_one_go_reports() {
    let d = out_dir("resume-same");
    let err = repro_erda(&d, None);
    assert!(!err.contains("resume:"), "{err}");
    let one_go = (read(d.join("report.md")), read(d.join("report.json")));
    assert!(reused(&d).is_empty());
    // Every point names the binary that measured it.
    let pts = points(d.join("erda-ycsb.json"));
    for p in &pts {
        assert_eq!(p["build"]["version"], env!("CARGO_PKG_VERSION"), "{p}");
        assert!(!p["build"]["commit"].as_str().unwrap().is_empty(), "{p}");
    }
    // Cut after the first experiments: the reports and the last files are not there.
    for f in [
        "report.md",
        "report.json",
        "erda-cpu.json",
        "erda-server-threads.json",
    ] {
        std::fs::remove_file(d.join(f)).unwrap();
    }
    let err = repro_erda(&d, Some("--resume"));
    assert!(!err.contains("running it again"), "{err}");
    for id in ["erda-ycsb", "erda-table1", "erda-cleaning"] {
        assert!(err.contains(&format!("resume: {id}: reusing")), "{err}");
    }
    assert_eq!(reused(&d).len(), 7, "{:?}", reused(&d));
    assert!(!reused(&d).contains(&"erda-cpu".to_string()));
    // The report's command is the command as run: with its --resume.
    let r: serde_json::Value = serde_json::from_str(&read(d.join("report.json"))).unwrap();
    assert_eq!(
        r["command"],
        format!(
            "remora repro erda --scale tiny --out {} --resume --quiet",
            d.display()
        )
    );
    let r: serde_json::Value = serde_json::from_str(&one_go.1).unwrap();
    assert_eq!(
        r["command"],
        format!(
            "remora repro erda --scale tiny --out {} --quiet",
            d.display()
        )
    );
    let md = read(d.join("report.md"));
    assert!(
        md.contains(&format!(
            "- `erda-ycsb` from `{}`",
            d.join("erda-ycsb.json").display()
        )),
        "{md}"
    );
    let (md, json) = without_reused(&d);
    assert!(
        md == one_go.0,
        "report.md differs:\n{md}\n---\n{}",
        one_go.0
    );
    assert!(json == one_go.1, "report.json differs");
    // Resumed again with nothing left to run: the same report.
    repro_erda(&d, Some("--resume"));
    assert_eq!(reused(&d).len(), 9);
    assert!(without_reused(&d) == one_go);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn resume_runs_again_an_experiment_whose_file_is_not_the_same_experiment() {
    let d = out_dir("resume-edited");
    repro_erda(&d, None);
    let one_go = (read(d.join("report.md")), read(d.join("report.json")));
    // One point's command edited: the file is not what this binary runs for erda-table1.
    let path = d.join("erda-table1.json");
    let text = read(path.clone());
    let cmd = points(path.clone())[0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    let edited = cmd.replacen("--records ", "--records 1", 1);
    assert_ne!(edited, cmd);
    let bad = text.replacen(&format!("\"{cmd}\""), &format!("\"{edited}\""), 1);
    assert_ne!(bad, text);
    std::fs::write(&path, bad).unwrap();
    // A file cut short, and one of an older binary (no build records) that matches.
    let cut = read(d.join("erda-cpu.json"));
    std::fs::write(d.join("erda-cpu.json"), &cut[..cut.len() / 3]).unwrap();
    let mut old = points(d.join("erda-ycsb.json"));
    for p in &mut old {
        p.as_object_mut().unwrap().remove("build");
    }
    std::fs::write(
        d.join("erda-ycsb.json"),
        serde_json::to_string_pretty(&old).unwrap() + "\n",
    )
    .unwrap();
    let old_text = read(d.join("erda-ycsb.json"));
    let err = repro_erda(&d, Some("--resume"));
    let again: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("running it again"))
        .collect();
    assert_eq!(again.len(), 3, "{err}");
    // The older binary's file: measured again by this build, unless any build is taken.
    assert!(
        again
            .iter()
            .any(|l| l.starts_with("resume: erda-ycsb: running it again: ")
                && l.contains("--resume-any-build")),
        "{err}"
    );
    assert!(
        again.iter().any(
            |l| l.starts_with("resume: erda-table1: running it again: ") && l.contains(&edited)
        ),
        "{err}"
    );
    assert!(
        again
            .iter()
            .any(|l| l.starts_with("resume: erda-cpu: running it again: ")),
        "{err}"
    );
    let r = reused(&d);
    assert_eq!(r.len(), 6, "{r:?}");
    assert!(
        !r.iter()
            .any(|x| ["erda-table1", "erda-cpu", "erda-ycsb"].contains(&x.as_str()))
    );
    assert!(read(path).contains(&cmd) && !read(d.join("erda-table1.json")).contains(&edited));
    assert!(
        without_reused(&d) == one_go,
        "the report differs from the one-go run's"
    );
    // The older binary's file again, taken with --resume-any-build (everything else is now
    // this build's).
    std::fs::write(d.join("erda-ycsb.json"), old_text).unwrap();
    let err = repro_erda(&d, Some("--resume-any-build"));
    assert!(!err.contains("running it again"), "{err}");
    assert!(err.contains("resume: erda-ycsb: reusing"), "{err}");
    assert_eq!(reused(&d).len(), 9);
    // The file of the older binary is reported as such.
    let md = read(d.join("report.md"));
    assert!(
        md.lines()
            .any(|l| l.starts_with("- `erda-ycsb` from") && l.contains("unknown build")),
        "{md}"
    );
    assert!(
        without_reused(&d) == one_go,
        "the report differs from the one-go run's"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn resume_reuses_memory_fits_measured_as_this_binary_measures_them() {
    let d = out_dir("resume-memory");
    let memory = |resume: bool| {
        let mut args = vec!["repro", "erda", "--memory", "--scale", "tiny", "--out"];
        args.push(d.to_str().unwrap());
        if resume {
            args.push("--resume");
        }
        let out = remora(&args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        err
    };
    memory(false);
    let fit = |d: &Path| {
        let m: serde_json::Value = serde_json::from_str(&read(d.join("memory.json"))).unwrap();
        m["fits"][0]["fit"].clone()
    };
    let first = fit(&d);
    assert_eq!(first["build"]["version"], env!("CARGO_PKG_VERSION"));
    let err = memory(true);
    assert!(
        err.contains("resume: memory: erda (erda): reusing"),
        "{err}"
    );
    assert_eq!(fit(&d), first);
    // Another key count: measured again.
    let text = read(d.join("memory.json"));
    let k = first["keys"][1].as_u64().unwrap();
    let bad = text.replacen(&format!("{k}\n"), &format!("{}\n", k + 1), 1);
    assert_ne!(bad, text);
    std::fs::write(d.join("memory.json"), bad).unwrap();
    let err = memory(true);
    assert!(
        err.contains("resume: memory: measuring erda again: "),
        "{err}"
    );
    assert_eq!(fit(&d)["keys"][1].as_u64(), Some(k));
    let _ = std::fs::remove_dir_all(&d);
}
