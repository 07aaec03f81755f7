//! A symbolized dump: interned logical frames, one sample per record (innermost first, the
//! allocator's own frames trimmed), and the call trees the reports are drawn from.

use std::collections::HashMap;

use crate::dump::Dump;
use crate::progress::Progress;
use crate::symbolize::{PcInfo, Symbolizer};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name, or `module+0xOFFSET` / `0xPC` when nothing names it.
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The mapped file ("" when unknown).
    pub module: String,
    /// File offset (or absolute pc) of the first pc seen at this frame; for pprof's address.
    pub address: u64,
}

impl Frame {
    /// `function (file:line)`, the text shown for a frame everywhere.
    pub fn label(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) => format!("{} ({}:{l})", self.function, short_path(f)),
            (Some(f), None) => format!("{} ({})", self.function, short_path(f)),
            _ => self.function.clone(),
        }
    }

    pub fn module_base(&self) -> &str {
        self.module.rsplit('/').next().unwrap_or(&self.module)
    }
}

fn short_path(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

pub struct Sample {
    /// Frame ids, innermost (the allocation site) first.
    pub stack: Vec<usize>,
    pub bytes: u64,
    pub count: u64,
    pub zygote: bool,
}

pub struct Profile {
    pub frames: Vec<Frame>,
    pub samples: Vec<Sample>,
    pub total_bytes: u64,
    pub total_count: u64,
    /// Modules named in the maps whose files could not be read.
    pub missing: Vec<String>,
}

/// Frames of the allocator itself: the front, this library, libc's malloc family, operator new.
fn is_allocator(frame: &Frame) -> bool {
    const MODULES: &[&str] = &["libmalloc_debug_front.so", "libc_malloc_debug.so"];
    const FUNCTIONS: &[&str] = &[
        "malloc",
        "calloc",
        "realloc",
        "free",
        "memalign",
        "posix_memalign",
        "aligned_alloc",
        "valloc",
        "pvalloc",
        "reallocarray",
        "strdup",
        "strndup",
    ];
    MODULES.contains(&frame.module_base())
        || FUNCTIONS.contains(&frame.function.as_str())
        || frame.function.starts_with("operator new")
        || frame.function.starts_with("__libc_")
}

pub const NO_BACKTRACE: &str = "[no backtrace]";

/// The id of `f` in `frames`, added when new.
fn intern(frames: &mut Vec<Frame>, ids: &mut HashMap<Frame, usize>, f: Frame) -> usize {
    if let Some(&id) = ids.get(&f) {
        return id;
    }
    frames.push(f.clone());
    ids.insert(f, frames.len() - 1);
    frames.len() - 1
}

/// Builds the profile and empties each record's frame lists as it goes (their memory is reused
/// for the samples: a big dump's records and samples are never both whole).
pub fn build(dump: &mut Dump, symbolizer: &mut Symbolizer) -> Profile {
    let mut frames: Vec<Frame> = Vec::new();
    let mut frame_ids: HashMap<Frame, usize> = HashMap::new();
    let mut pcs: HashMap<u64, PcInfo> = HashMap::new();
    // The logical frame ids of a pc, when no bt_info line changes them: most frames of a big
    // dump are repeats, and this spares them the strings and hashing of a Frame.
    let mut pc_ids: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut progress = Progress::new(
        "symbolizing",
        dump.records.iter().map(|r| r.frames.len() as u64).sum(),
    );
    let mut done = 0u64;
    let mut samples = Vec::with_capacity(dump.records.len());
    let mut logical: Vec<usize> = Vec::new();
    for index in 0..dump.records.len() {
        let record = &dump.records[index];
        logical.clear();
        for (i, &pc) in record.frames.iter().enumerate() {
            done += 1;
            if done.is_multiple_of(4096) {
                progress.set(done);
            }
            let fallback = record.bt_info.get(i).filter(|b| !b.function.is_empty());
            if fallback.is_none()
                && let Some(ids) = pc_ids.get(&pc)
            {
                logical.extend_from_slice(ids);
                continue;
            }
            let info = pcs
                .entry(pc)
                .or_insert_with(|| symbolizer.resolve(pc, dump.map_for(pc)));
            // Without a map for the pc, bt_info's map name still tells the module.
            let (module, rel) = match fallback {
                Some(b) if info.module.is_empty() && !b.map.is_empty() => (b.map.clone(), b.rel_pc),
                _ => (info.module.clone(), info.rel),
            };
            let start = logical.len();
            for r in &info.frames {
                let function = r
                    .function
                    .clone()
                    .or_else(|| fallback.map(|b| b.function.clone()))
                    .unwrap_or_else(|| {
                        if module.is_empty() {
                            format!("0x{pc:x}")
                        } else {
                            format!("{}+0x{rel:x}", short_path(&module))
                        }
                    });
                let frame = Frame {
                    function,
                    file: r.file.clone(),
                    line: r.line,
                    module: module.clone(),
                    address: rel,
                };
                logical.push(intern(&mut frames, &mut frame_ids, frame));
            }
            if fallback.is_none() {
                pc_ids.insert(pc, logical[start..].to_vec());
            }
        }
        let skip = logical
            .iter()
            .take_while(|&&id| is_allocator(&frames[id]))
            .count();
        let stack: Vec<usize> = if skip < logical.len() {
            logical[skip..].to_vec()
        } else if logical.is_empty() {
            let none = Frame {
                function: NO_BACKTRACE.to_string(),
                file: None,
                line: None,
                module: String::new(),
                address: 0,
            };
            vec![intern(&mut frames, &mut frame_ids, none)]
        } else {
            logical.clone()
        };
        let count = dump.count(record);
        samples.push(Sample {
            stack,
            bytes: record.size.saturating_mul(count),
            count,
            zygote: record.zygote,
        });
        let record = &mut dump.records[index];
        record.frames = Vec::new();
        record.bt_info = Vec::new();
    }
    progress.finish();
    let total_bytes = samples.iter().fold(0u64, |t, s| t.saturating_add(s.bytes));
    let total_count = samples.iter().fold(0u64, |t, s| t.saturating_add(s.count));
    Profile {
        frames,
        samples,
        total_bytes,
        total_count,
        missing: std::mem::take(&mut symbolizer.missing),
    }
}

/// A call tree node: `frame` is None only at the root.
#[derive(Debug, Default)]
pub struct Node {
    pub frame: Option<usize>,
    pub bytes: u64,
    pub count: u64,
    /// Biggest first (bytes, then count).
    pub children: Vec<Node>,
    /// The children left out by the [`Limits`], summed.
    pub hidden: Hidden,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Hidden {
    pub nodes: usize,
    pub bytes: u64,
    pub count: u64,
}

/// What a tree keeps: a report of a million distinct stacks must not build (or draw) a node
/// for each of their frames.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Children with fewer bytes are summed into [`Node::hidden`].
    pub min_bytes: u64,
    /// At most this many children of the root (the biggest).
    pub max_sites: usize,
    /// Levels below the root.
    pub max_depth: usize,
}

impl Limits {
    pub const ALL: Limits = Limits {
        min_bytes: 0,
        max_sites: usize::MAX,
        max_depth: usize::MAX,
    };
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Allocation sites first, expanding towards their callers.
    BottomUp,
    /// Outermost callers first (the flamegraph's shape).
    TopDown,
}

fn frame_at(sample: &Sample, depth: usize, dir: Direction) -> Option<usize> {
    match dir {
        Direction::BottomUp => sample.stack.get(depth).copied(),
        Direction::TopDown => sample
            .stack
            .len()
            .checked_sub(depth + 1)
            .map(|i| sample.stack[i]),
    }
}

/// The call tree in `dir`, within `limits`. The samples are sorted by path once; then every
/// node's samples are one contiguous run, split by the next frame: only the nodes kept are
/// ever built, so memory follows the tree drawn, not the number of distinct stacks.
pub fn tree(profile: &Profile, dir: Direction, limits: Limits) -> Node {
    let samples = &profile.samples;
    let mut order: Vec<u32> = (0..samples.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (&samples[a as usize].stack, &samples[b as usize].stack);
        match dir {
            Direction::BottomUp => a.iter().cmp(b.iter()),
            Direction::TopDown => a.iter().rev().cmp(b.iter().rev()),
        }
    });
    let mut root = Node::default();
    for s in samples {
        root.bytes = root.bytes.saturating_add(s.bytes);
        root.count = root.count.saturating_add(s.count);
    }
    grow(&mut root, samples, &order, 0, dir, &limits);
    root
}

fn grow(
    node: &mut Node,
    samples: &[Sample],
    run: &[u32],
    depth: usize,
    dir: Direction,
    limits: &Limits,
) {
    if depth >= limits.max_depth {
        return;
    }
    // (frame, start, end, bytes, count) of each child's run.
    let mut groups: Vec<(usize, usize, usize, u64, u64)> = Vec::new();
    let mut i = 0;
    while i < run.len() {
        let Some(frame) = frame_at(&samples[run[i] as usize], depth, dir) else {
            // The stack ends at this node.
            i += 1;
            continue;
        };
        let (mut bytes, mut count, start) = (0u64, 0u64, i);
        while i < run.len() && frame_at(&samples[run[i] as usize], depth, dir) == Some(frame) {
            let s = &samples[run[i] as usize];
            bytes = bytes.saturating_add(s.bytes);
            count = count.saturating_add(s.count);
            i += 1;
        }
        groups.push((frame, start, i, bytes, count));
    }
    groups.sort_by(|a, b| b.3.cmp(&a.3).then(b.4.cmp(&a.4)));
    for (n, &(frame, start, end, bytes, count)) in groups.iter().enumerate() {
        if (depth == 0 && n >= limits.max_sites) || bytes < limits.min_bytes {
            node.hidden.nodes += 1;
            node.hidden.bytes = node.hidden.bytes.saturating_add(bytes);
            node.hidden.count = node.hidden.count.saturating_add(count);
            continue;
        }
        let mut child = Node {
            frame: Some(frame),
            bytes,
            count,
            ..Node::default()
        };
        grow(
            &mut child,
            samples,
            &run[start..end],
            depth + 1,
            dir,
            limits,
        );
        node.children.push(child);
    }
}

/// The allocation sites (the bottom-up tree's first level), biggest first.
pub fn sites(profile: &Profile) -> Node {
    tree(
        profile,
        Direction::BottomUp,
        Limits {
            max_depth: 1,
            ..Limits::ALL
        },
    )
}

pub fn percent(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}
