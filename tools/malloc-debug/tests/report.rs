//! `malloc-debug report` on a real v1.2 dump from leaky.c and on hand-written v1.0/v1.1 dumps;
//! the HTML, SVG and pprof outputs; malformed input.

mod common;
use common::*;
use std::io::Read;
use std::path::Path;

fn report(args: &[&str], dump: &Path) -> String {
    ok(cli().arg("report").arg(dump).args(args).output().unwrap())
}

/// The site lines of the text tree (depth 0: no indentation after the count column).
fn site_lines(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.contains("SITE"))
        .skip(1)
        .filter(|l| l.len() > 32 && !l[32..].starts_with(' '))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn text_tree_of_a_real_dump() {
    let text = report(&[], dump10());
    assert!(
        text.starts_with("Heap dump v1.2, fingerprint 'unknown': 12708 bytes in 14 allocations (4 records, 3 sites, "),
        "{text}"
    );
    let sites = site_lines(&text);
    assert_eq!(sites.len(), 3, "{text}");
    assert!(
        sites[0].starts_with("12288 96.69% 3 big_buffers (leaky.c:14) ["),
        "{text}"
    );
    assert!(
        sites[1].starts_with("320 2.52% 10 small_nodes (leaky.c:21) ["),
        "{text}"
    );
    assert!(
        sites[2].starts_with("100 0.79% 1 main (leaky.c:32) ["),
        "{text}"
    );
    // Callers of the top site, biggest first.
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("big_buffers"))
        .unwrap();
    assert!(
        lines[at + 1].contains("8192") && lines[at + 1].contains("  load_assets (leaky.c:24)"),
        "{text}"
    );
    assert!(lines[at + 2].contains("    main (leaky.c:29)"), "{text}");
    // --top limits the sites.
    let text = report(&["--top", "1"], dump10());
    assert_eq!(site_lines(&text).len(), 1, "{text}");
    assert!(text.contains("Top 1 of 3 allocation sites"), "{text}");
}

#[test]
fn html_svg_and_pprof_outputs() {
    let dir = tmp_dir("outputs");
    let (html, svg, pb) = (dir.join("r.html"), dir.join("f.svg"), dir.join("p.pb.gz"));
    report(
        &[
            "--html",
            html.to_str().unwrap(),
            "--flamegraph",
            svg.to_str().unwrap(),
            "--pprof",
            pb.to_str().unwrap(),
        ],
        dump10(),
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<details><summary>"), "collapsible tree");
    assert!(page.contains("big_buffers (leaky.c:14)"));
    assert!(page.contains("<svg xmlns="), "inline flamegraph");
    // Self-contained: nothing is fetched.
    for needle in ["src=", "href=", "@import", "url("] {
        assert!(!page.contains(needle), "HTML references {needle}");
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(
        svg.contains("<title>big_buffers (leaky.c:14): 8192 bytes (64.46%), 2 allocations</title>"),
        "{svg}"
    );
    assert!(svg.trim_end().ends_with("</svg>"));

    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&pb).unwrap())
        .read_to_end(&mut raw)
        .expect("gzip");
    let p = pprof::decode(&raw);
    assert_eq!(p.strings[0], "");
    let name = |i: u64| p.strings[i as usize].as_str();
    let types: Vec<(&str, &str)> = p
        .sample_types
        .iter()
        .map(|&(t, u)| (name(t), name(u)))
        .collect();
    assert_eq!(
        types,
        [("inuse_objects", "count"), ("inuse_space", "bytes")]
    );
    let (count, bytes) = p
        .samples
        .iter()
        .fold((0, 0), |(c, b), s| (c + s.1[0], b + s.1[1]));
    assert_eq!((count, bytes), (14, 12708));
    // Every sample's first location is a site, resolved through location → line → function.
    let mut sites: Vec<String> = p
        .samples
        .iter()
        .map(|s| {
            let loc = &p.locations[&s.0[0]];
            name(p.functions[&loc[0].0]).to_string() + ":" + &loc[0].1.to_string()
        })
        .collect();
    sites.sort();
    assert_eq!(
        sites,
        [
            "big_buffers:14",
            "big_buffers:14",
            "main:32",
            "small_nodes:21"
        ]
    );
}

/// Minimal profile.proto reader for the test (the fields the writer uses).
mod pprof {
    use prost::encoding::{WireType, decode_key, decode_varint};
    use std::collections::HashMap;

    #[derive(Default)]
    pub struct Profile {
        pub sample_types: Vec<(u64, u64)>,
        pub samples: Vec<(Vec<u64>, Vec<u64>)>,
        /// location id → [(function id, line)]
        pub locations: HashMap<u64, Vec<(u64, u64)>>,
        /// function id → name string index
        pub functions: HashMap<u64, u64>,
        pub strings: Vec<String>,
    }

    fn fields(mut buf: &[u8]) -> Vec<(u32, Vec<u8>, u64)> {
        let mut out = Vec::new();
        while !buf.is_empty() {
            let (tag, wt) = decode_key(&mut buf).expect("key");
            match wt {
                WireType::Varint => out.push((tag, Vec::new(), decode_varint(&mut buf).unwrap())),
                WireType::LengthDelimited => {
                    let n = decode_varint(&mut buf).unwrap() as usize;
                    out.push((tag, buf[..n].to_vec(), 0));
                    buf = &buf[n..];
                }
                other => panic!("unexpected wire type {other:?}"),
            }
        }
        out
    }

    fn packed(mut b: &[u8]) -> Vec<u64> {
        let mut v = Vec::new();
        while !b.is_empty() {
            v.push(decode_varint(&mut b).unwrap());
        }
        v
    }

    pub fn decode(buf: &[u8]) -> Profile {
        let mut p = Profile::default();
        for (tag, bytes, _) in fields(buf) {
            match tag {
                1 => {
                    let f = fields(&bytes);
                    p.sample_types.push((f[0].2, f[1].2));
                }
                2 => {
                    let f = fields(&bytes);
                    p.samples.push((packed(&f[0].1), packed(&f[1].1)));
                }
                4 => {
                    let mut id = 0;
                    let mut lines = Vec::new();
                    for (t, b, v) in fields(&bytes) {
                        match t {
                            1 => id = v,
                            4 => {
                                let l = fields(&b);
                                let line = l.iter().find(|f| f.0 == 2).map_or(0, |f| f.2);
                                lines.push((l[0].2, line));
                            }
                            _ => {}
                        }
                    }
                    p.locations.insert(id, lines);
                }
                5 => {
                    let f = fields(&bytes);
                    p.functions.insert(f[0].2, f[1].2);
                }
                6 => p.strings.push(String::from_utf8(bytes).unwrap()),
                _ => {}
            }
        }
        p
    }
}

/// File offset of big_buffers' call to malloc in leaky, read off the real dump.
fn big_buffers_offset() -> u64 {
    let text = std::fs::read_to_string(dump10()).unwrap();
    let record = text
        .lines()
        .find(|l| l.contains("sz     4096  num    2"))
        .expect("4096 x 2 record");
    let pc = u64::from_str_radix(record.split_whitespace().nth(8).unwrap(), 16).unwrap();
    let maps = text.split("MAPS\n").nth(1).unwrap();
    for line in maps.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let Some((s, e)) = t[0].split_once('-') else {
            continue;
        };
        let (s, e) = (
            u64::from_str_radix(s, 16).unwrap(),
            u64::from_str_radix(e, 16).unwrap(),
        );
        if (s..e).contains(&pc) {
            return pc - s + u64::from_str_radix(t[2], 16).unwrap();
        }
    }
    panic!("no map for {pc:x}");
}

const MAPS_V1: &str = "MAPS
5000000000-5000100000 r-xp 00000000 fe:00 1          /system/bin/leaky
7000000000-7000100000 r-xp 00000000 fe:00 2          /system/lib64/libfoo.so
END
";

#[test]
fn v1_1_dump_symbolized_through_a_symbols_tree() {
    let dir = tmp_dir("v11");
    let symbols = dir.join("symbols");
    std::fs::create_dir_all(symbols.join("system/bin")).unwrap();
    std::fs::copy(leaky(), symbols.join("system/bin/leaky")).unwrap();
    let pc = 0x5000000000 + big_buffers_offset();
    // v1.1 (API 28): no fingerprint line, zero-padded frames.
    let dump = dir.join("v11.txt");
    std::fs::write(
        &dump,
        format!(
            "Android Native Heap Dump v1.1\n\nTotal memory: 8500\nAllocation records: 3\nBacktrace size: 4\n\n\
             z 0  sz     4096  num    2  bt {pc:016x} 0000007000001234\n\
             z 1  sz      300  num    1  bt 0000007000002000\n\
             z 0  sz        8  num    1  bt\n{MAPS_V1}"
        ),
    )
    .unwrap();
    let text = report(&["--symbols", symbols.to_str().unwrap()], &dump);
    assert!(text.starts_with("Heap dump v1.1: 8500 bytes in 4 allocations (3 records, 3 sites, 2 maps, backtrace size 4)"), "{text}");
    let sites = site_lines(&text);
    assert_eq!(
        sites,
        [
            "8192 96.38% 2 big_buffers (leaky.c:14) [/system/bin/leaky]",
            "300 3.53% 1 libfoo.so+0x2000 [/system/lib64/libfoo.so]",
            "8 0.09% 1 [no backtrace]",
        ],
        "{text}"
    );
    assert!(
        text.contains("  2    libfoo.so+0x1234\n"),
        "caller of big_buffers:\n{text}"
    );
    assert!(
        text.contains("Not symbolized (file not found; see --symbols): /system/lib64/libfoo.so"),
        "{text}"
    );
    // Without the symbols tree nothing names the frames.
    let text = report(&[], &dump);
    assert!(text.contains("leaky+0x"), "{text}");
}

#[test]
fn v1_0_dump_with_unreliable_num() {
    let dir = tmp_dir("v10");
    let dump = dir.join("v10.txt");
    // Android N: every num equals the backtrace size, so each record counts once.
    std::fs::write(
        &dump,
        format!(
            "Android Native Heap Dump v1.0\n\nTotal memory: 150\nAllocation records: 2\nBacktrace size: 32\n\n\
             z 0  sz      100  num    32  bt 00000070000010a0 0000007000001234\n\
             z 0  sz       50  num    32  bt 00000070000010a0\n{MAPS_V1}"
        ),
    )
    .unwrap();
    let out = cli().arg("report").arg(&dump).output().unwrap();
    let text = ok(out.clone());
    assert!(
        stderr(&out).contains("v1.0 dump whose 'num' column is unreliable"),
        "{}",
        stderr(&out)
    );
    assert!(
        text.starts_with("Heap dump v1.0: 150 bytes in 2 allocations"),
        "{text}"
    );
    assert_eq!(
        site_lines(&text),
        ["150 100.00% 2 libfoo.so+0x10a0 [/system/lib64/libfoo.so]"]
    );

    // A v1.0 dump with believable counts keeps them.
    std::fs::write(
        &dump,
        format!(
            "Android Native Heap Dump v1.0\n\nTotal memory: 300\nAllocation records: 1\nBacktrace size: 32\n\n\
             z 0  sz      100  num    3  bt 00000070000010a0\n{MAPS_V1}"
        ),
    )
    .unwrap();
    let text = report(&[], &dump);
    assert!(
        text.starts_with("Heap dump v1.0: 300 bytes in 3 allocations"),
        "{text}"
    );
}

#[test]
fn bt_info_names_frames_without_files() {
    let dir = tmp_dir("btinfo");
    let dump = dir.join("full.txt");
    std::fs::write(
        &dump,
        "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'google/x/y:14'\n\nTotal memory: 64\n\
         Allocation records: 1\nBacktrace size: 16\n\n\
         z 0  sz       64  num    1  bt 7000001000 7000002000\n\
         \x20 bt_info {\"/vendor/lib64/libbar.so\" 1000 \"Bar::make()\" 10} {\"/vendor/lib64/libbar.so\" 2000 \"main\" 4}\n\
         MAPS\nEND\n",
    )
    .unwrap();
    let text = report(&[], &dump);
    assert!(
        text.starts_with("Heap dump v1.2, fingerprint 'google/x/y:14': 64 bytes in 1 allocations"),
        "{text}"
    );
    assert_eq!(
        site_lines(&text),
        ["64 100.00% 1 Bar::make() [/vendor/lib64/libbar.so]"]
    );
    assert!(text.contains("  main\n"), "{text}");
}

fn malformed(name: &str, body: &str) -> String {
    let dir = tmp_dir(&format!("bad-{name}"));
    let dump = dir.join("bad.txt");
    std::fs::write(&dump, body).unwrap();
    let out = cli().arg("report").arg(&dump).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    err.replace(&dump.display().to_string(), "DUMP")
}

const HEAD: &str = "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'x'\n\nTotal memory: 1\nAllocation records: 1\nBacktrace size: 16\n\n";

#[test]
fn malformed_input_names_the_line_and_what_was_expected() {
    assert_eq!(
        malformed("header", "hello\n"),
        "malloc-debug: DUMP:1: expected 'Android Native Heap Dump v1.0', 'v1.1' or 'v1.2', found \"hello\"\n"
    );
    assert_eq!(
        malformed("empty", ""),
        "malloc-debug: DUMP:1: unexpected end of file: expected 'Android Native Heap Dump v1.0', 'v1.1' or 'v1.2'\n"
    );
    assert_eq!(
        malformed(
            "total",
            "Android Native Heap Dump v1.1\n\nTotal memory: lots\n"
        ),
        "malloc-debug: DUMP:3: expected 'Total memory: <number>', found \"Total memory: lots\"\n"
    );
    assert_eq!(
        malformed(
            "record",
            &format!("{HEAD}z 0  sz 1  num 1  bt 12\nz 0  sz x  num 1  bt\nMAPS\nEND\n")
        ),
        "malloc-debug: DUMP:10: expected a decimal number after 'sz' in a record line 'z <0|1>  sz <size>  num <count>  bt [<hex frame>...]', found \"z 0  sz x  num 1  bt\"\n"
    );
    assert_eq!(
        malformed(
            "frame",
            &format!("{HEAD}z 0  sz 1  num 1  bt 12 xyz\nMAPS\nEND\n")
        ),
        "malloc-debug: DUMP:9: expected hexadecimal frames after 'bt' in a record line 'z <0|1>  sz <size>  num <count>  bt [<hex frame>...]', found \"z 0  sz 1  num 1  bt 12 xyz\"\n"
    );
    assert_eq!(
        malformed(
            "maps",
            &format!("{HEAD}z 0  sz 1  num 1  bt 12\nMAPS\nnot a map\nEND\n")
        ),
        "malloc-debug: DUMP:11: expected a maps line ('START-END PERMS OFFSET DEV INODE [NAME]') or 'END', found \"not a map\"\n"
    );
    assert_eq!(
        malformed(
            "truncated",
            &format!("{HEAD}z 0  sz 1  num 1  bt 12\nMAPS\n7f-80 r-xp 0 fe:00 1 /x\n")
        ),
        "malloc-debug: DUMP:12: unexpected end of file: expected a maps line or 'END'\n"
    );
    assert_eq!(
        malformed("no-maps", &format!("{HEAD}z 0  sz 1  num 1  bt 12\n")),
        "malloc-debug: DUMP:10: unexpected end of file: expected a record line ('z 0  sz ...') or 'MAPS'\n"
    );
    let frames = " 1".repeat(1025);
    assert_eq!(
        malformed(
            "frames",
            &format!("{HEAD}z 0  sz 1  num 1  bt{frames}\nMAPS\nEND\n")
        ),
        "malloc-debug: DUMP:9: expected at most 1024 frames after 'bt' in a record line 'z <0|1>  sz <size>  num <count>  bt [<hex frame>...]', found \"z 0  sz 1  num 1  bt 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\"\n"
    );
    assert_eq!(
        malformed(
            "bt-info-first",
            &format!("{HEAD}  bt_info {{\"\" 1 \"f\" 0}}\nMAPS\nEND\n")
        ),
        "malloc-debug: DUMP:9: expected a record line before 'bt_info', found \"  bt_info {\\\"\\\" 1 \\\"f\\\" 0}\"\n"
    );
    let out = cli()
        .args(["report", "/nonexistent/dump.txt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "malloc-debug: /nonexistent/dump.txt: No such file or directory (os error 2)\n"
    );
}

#[test]
fn binary_garbage_is_an_error_not_a_panic() {
    let mut junk = b"Android Native Heap Dump v1.2\n\n".to_vec();
    junk.extend((0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    let dir = tmp_dir("junk");
    std::fs::write(dir.join("junk"), &junk).unwrap();
    let out = cli().arg("report").arg(dir.join("junk")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("junk:3: expected"),
        "{}",
        stderr(&out)
    );
}

/// 200,000 distinct stacks (pcs spread over leaky's code, as in a dump of a big program): the
/// HTML stays small because the trees keep only what is drawn — the sites table, the call tree
/// above 1/20000 of the total, the flamegraph above 1/10000 — and says what it left out.
#[test]
fn html_of_many_distinct_stacks_is_bounded() {
    let real = std::fs::read_to_string(dump10()).unwrap();
    let maps = &real[real.find("MAPS\n").unwrap()..];
    let text = maps
        .lines()
        .find(|l| l.contains(" r-xp ") && l.ends_with("/leaky"))
        .unwrap();
    let (range, _) = text.split_once(' ').unwrap();
    let (start, end) = range.split_once('-').unwrap();
    let start = u64::from_str_radix(start, 16).unwrap();
    let end = u64::from_str_radix(end, 16).unwrap();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let records = 200_000;
    let mut dump = format!(
        "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'unknown'\n\nTotal memory: {}\n\
         Allocation records: {records}\nBacktrace size: 16\n\n",
        records * 64
    );
    for _ in 0..records {
        dump.push_str("z 0  sz       64  num    1  bt");
        for _ in 0..8 {
            dump.push_str(&format!(" {:x}", start + 1 + next() % (end - start - 1)));
        }
        dump.push('\n');
    }
    dump.push_str(maps);
    let dir = tmp_dir("many-stacks");
    let path = dir.join("many.txt");
    std::fs::write(&path, &dump).unwrap();
    let html = dir.join("many.html");
    let svg = dir.join("many.svg");
    let out = cli()
        .arg("report")
        .arg(&path)
        .arg("--top")
        .arg("1")
        .arg("--html")
        .arg(&html)
        .arg("--flamegraph")
        .arg(&svg)
        .output()
        .unwrap();
    ok(out);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.len() < 3_000_000, "{} bytes", page.len());
    assert!(page.contains("smaller callers not shown"));
    let frames = page.matches("<g class=\"f\"").count();
    assert!(
        frames > 100 && frames <= 10_000 * 16,
        "{frames} flamegraph frames"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(svg.matches("<g class=\"f\"").count(), frames);
}
