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

pub fn build(dump: &Dump, symbolizer: &mut Symbolizer) -> Profile {
    let mut frames: Vec<Frame> = Vec::new();
    let mut frame_ids: HashMap<Frame, usize> = HashMap::new();
    let mut pcs: HashMap<u64, PcInfo> = HashMap::new();
    let mut progress = Progress::new(
        "symbolizing",
        dump.records.iter().map(|r| r.frames.len() as u64).sum(),
    );
    let mut done = 0u64;
    let mut samples = Vec::with_capacity(dump.records.len());
    let mut intern = |f: Frame| -> usize {
        if let Some(&id) = frame_ids.get(&f) {
            return id;
        }
        frames.push(f.clone());
        frame_ids.insert(f, frames.len() - 1);
        frames.len() - 1
    };
    for record in &dump.records {
        let mut logical: Vec<Frame> = Vec::new();
        for (i, &pc) in record.frames.iter().enumerate() {
            done += 1;
            progress.set(done);
            let info = pcs
                .entry(pc)
                .or_insert_with(|| symbolizer.resolve(pc, dump.map_for(pc)));
            let fallback = record.bt_info.get(i).filter(|b| !b.function.is_empty());
            // Without a map for the pc, bt_info's map name still tells the module.
            let (module, rel) = match fallback {
                Some(b) if info.module.is_empty() && !b.map.is_empty() => (b.map.clone(), b.rel_pc),
                _ => (info.module.clone(), info.rel),
            };
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
                logical.push(Frame {
                    function,
                    file: r.file.clone(),
                    line: r.line,
                    module: module.clone(),
                    address: rel,
                });
            }
        }
        let skip = logical.iter().take_while(|f| is_allocator(f)).count();
        if skip < logical.len() {
            logical.drain(..skip);
        }
        if logical.is_empty() {
            logical.push(Frame {
                function: NO_BACKTRACE.to_string(),
                file: None,
                line: None,
                module: String::new(),
                address: 0,
            });
        }
        let count = dump.count(record);
        samples.push(Sample {
            stack: logical.into_iter().map(&mut intern).collect(),
            bytes: record.size.saturating_mul(count),
            count,
            zygote: record.zygote,
        });
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
#[derive(Debug)]
pub struct Node {
    pub frame: Option<usize>,
    pub bytes: u64,
    pub count: u64,
    pub children: Vec<Node>,
    index: HashMap<usize, usize>,
}

impl Node {
    fn new(frame: Option<usize>) -> Node {
        Node {
            frame,
            bytes: 0,
            count: 0,
            children: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn insert(&mut self, mut path: impl Iterator<Item = usize>, bytes: u64, count: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.count = self.count.saturating_add(count);
        if let Some(id) = path.next() {
            let slot = match self.index.get(&id) {
                Some(&i) => i,
                None => {
                    self.children.push(Node::new(Some(id)));
                    self.index.insert(id, self.children.len() - 1);
                    self.children.len() - 1
                }
            };
            self.children[slot].insert(path, bytes, count);
        }
    }

    fn sort(&mut self) {
        self.children
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.count.cmp(&a.count)));
        self.index.clear();
        for c in &mut self.children {
            c.sort();
        }
    }
}

/// Allocation sites first, expanding towards their callers.
pub fn bottom_up(profile: &Profile) -> Node {
    let mut root = Node::new(None);
    for s in &profile.samples {
        root.insert(s.stack.iter().copied(), s.bytes, s.count);
    }
    root.sort();
    root
}

/// Outermost callers first (the flamegraph's shape).
pub fn top_down(profile: &Profile) -> Node {
    let mut root = Node::new(None);
    for s in &profile.samples {
        root.insert(s.stack.iter().rev().copied(), s.bytes, s.count);
    }
    root.sort();
    root
}

pub fn percent(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}
