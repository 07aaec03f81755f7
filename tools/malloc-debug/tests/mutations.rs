//! Malformed input never panics: a real dump and a record file, mutated many ways (bytes
//! flipped, lines dropped, duplicated or cut, digits replaced by huge numbers), each either
//! reports (exit 0) or is refused with a `FILE:LINE: expected ...` error (exit 2).

mod common;
use common::*;
use std::path::Path;

/// A small deterministic generator (no test depends on luck).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Lcg, text: &str) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
    for _ in 0..1 + rng.next(3) {
        let i = rng.next(lines.len());
        match rng.next(6) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => {
                let n = rng.next(lines[i].len() + 1);
                lines[i].truncate(n);
            }
            3 if !lines[i].is_empty() => {
                let at = rng.next(lines[i].len());
                lines[i][at] = rng.next(256) as u8;
            }
            4 => {
                // Every number on the line becomes enormous.
                let s = String::from_utf8_lossy(&lines[i]).into_owned();
                let s: String = s
                    .split(' ')
                    .map(|w| {
                        if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
                            "18446744073709551615"
                        } else {
                            w
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                lines[i] = s.into_bytes();
            }
            _ => lines.truncate(i),
        }
        if lines.is_empty() {
            break;
        }
    }
    let mut out = lines.join(&b'\n');
    out.push(b'\n');
    out
}

/// Returns whether the input was accepted.
fn check(command: &str, file: &Path, body: &[u8]) -> bool {
    std::fs::write(file, body).unwrap();
    let out = cli().arg(command).arg(file).output().unwrap();
    let err = stderr(&out);
    match out.status.code() {
        Some(0) => true,
        Some(2) => {
            assert!(
                err.starts_with(&format!("malloc-debug: {}:", file.display()))
                    && err.contains("expected"),
                "{err}\n--- input\n{}",
                String::from_utf8_lossy(body)
            );
            false
        }
        other => panic!(
            "exit {other:?}: {err}\n--- input\n{}",
            String::from_utf8_lossy(body)
        ),
    }
}

#[test]
fn mutated_dumps_report_or_name_the_line() {
    let text = std::fs::read_to_string(dump10()).unwrap();
    let file = tmp_dir("mutated-dump").join("dump.txt");
    let mut rng = Lcg(1);
    let accepted = (0..150)
        .filter(|_| check("report", &file, &mutate(&mut rng, &text)))
        .count();
    // Both outcomes happen, so both paths were exercised.
    assert!((1..150).contains(&accepted), "{accepted} of 150 accepted");
}

#[test]
fn mutated_record_files_summarize_or_name_the_line() {
    let text = "\
186: malloc 0xb6038060 20 1000 1500
186: calloc 0xb609f080 32 4 2000 2100
186: memalign 0x85423660 16 104 2200 2300
186: realloc 0xb603e9a0 0xb609f080 12 3000 3200 4096
186: free 0xb6038060 5000 5100 4096
186: realloc 0x0 0xb603e9a0 0 7000 8000 128
187: thread_done 0x0 999
";
    let file = tmp_dir("mutated-records").join("rec.txt");
    let mut rng = Lcg(2);
    let accepted = (0..150)
        .filter(|_| check("records", &file, &mutate(&mut rng, text)))
        .count();
    assert!((1..150).contains(&accepted), "{accepted} of 150 accepted");
}
