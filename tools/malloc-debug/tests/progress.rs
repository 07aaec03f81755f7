//! The progress bar: drawn on stderr for large inputs when stderr is a terminal (a pty from
//! util-linux `script`), never when it is not.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

/// Runs the CLI with stdout and stderr on a pseudo-terminal; returns everything it wrote there.
fn on_a_terminal(args: &[&str]) -> String {
    let mut line = sh_word(env!("CARGO_BIN_EXE_malloc-debug"));
    for a in args {
        line.push(' ');
        line.push_str(&sh_word(a));
    }
    // Keep stdout off the terminal so only stderr's bar is there.
    line.push_str(" >/dev/null");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .expect("run script (util-linux)");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

fn sh_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn big_dump(dir: &Path) -> String {
    // 50000 records of ~50 bytes: past the 1 MiB below which no bar is drawn.
    let mut text = String::from(
        "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'x'\n\nTotal memory: 50000\n\
         Allocation records: 50000\nBacktrace size: 16\n\n",
    );
    for i in 0..50000u64 {
        text.push_str(&format!(
            "z 0  sz        1  num    1  bt {:x}\n",
            0x1000 + i
        ));
    }
    text.push_str("MAPS\nEND\n");
    let path = dir.join("big.txt");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn report_draws_a_bar_on_a_terminal_only() {
    let dir = tmp_dir("progress");
    let dump = big_dump(&dir);
    let tty = on_a_terminal(&["report", &dump, "--top", "1"]);
    assert!(tty.contains("\rreading dump   ["), "{tty:?}");
    // Cleared when done: the last thing written is the erase.
    assert!(tty.ends_with(&format!("\r{:70}\r", "")), "{tty:?}");

    let out = cli()
        .args(["report", &dump, "--top", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(stderr(&out), "");

    // Small inputs: no bar even on a terminal.
    let tty = on_a_terminal(&["report", dump10().to_str().unwrap()]);
    assert_eq!(tty, "");
}

#[test]
fn records_draws_a_bar_on_a_terminal() {
    let dir = tmp_dir("progress-records");
    let file = dir.join("rec.txt");
    let text: String = (0..60000u64)
        .map(|i| format!("1: malloc 0x{:x} 16 {} {}\n", 0x1000 + i * 16, i + 1, i + 2))
        .collect();
    std::fs::write(&file, text).unwrap();
    let tty = on_a_terminal(&["records", file.to_str().unwrap()]);
    assert!(tty.contains("\rreading records ["), "{tty:?}");
}
