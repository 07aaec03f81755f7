//! The fast format's frame lines as a report prints them: each distinct pc's line is rendered
//! once per symbolization session and kept (the text after the frame number), so a frame shared
//! by a million leaks is its number and one copy (docs/performance.md, "Leak reports,
//! 2026-11-26 second session"). Under `malloc-debug run` the kept text also carries what the
//! CLI adds to the line (`  FUNCTION at FILE:LINE`), asked once per pc (annotate.rs). Each
//! round trip to the server costs tens of microseconds of wake-ups, so pcs are asked about
//! `annotate::BATCH` at a time: a report announces its backtraces first
//! ([`Resolver::prepare`]), and their new pcs queue until a batch is full or a line is needed
//! (node's exit report: 326 distinct pcs, 21 round trips instead of 114 one per backtrace).

use super::format::{self, Resolved, Resolver};
use super::{Str, Symbolizer, keep_in};
use crate::fmt::StackBuf;

impl Resolver for Symbolizer {
    fn prepare(&mut self, frames: &[usize]) {
        #[cfg(not(target_os = "android"))]
        if super::annotating() {
            for &pc in frames {
                let Ok(i) = self.frame_index(pc) else {
                    continue;
                };
                // The queue is shorter than a batch: it is flushed when it reaches one.
                let queued = self.queued.as_slice().contains(&(i as u32));
                if self.frames.as_slice()[i].fast_tail.is_some() || queued {
                    continue;
                }
                let _ = self.queued.push(i as u32);
                if self.queued.len() >= super::annotate::BATCH {
                    self.keep_queued();
                }
            }
        }
        #[cfg(target_os = "android")]
        let _ = frames;
    }

    fn resolve(&mut self, pc: usize, f: &mut dyn FnMut(&Resolved<'_>)) {
        let fr = self.frame(pc);
        self.with_resolved(&fr, |r| f(r));
    }

    /// Renders each distinct pc's line once (with frame number 0) and keeps the text after the
    /// number: a frame shared by a million leaks is then two copies, no formatting
    /// (docs/performance.md, "Leak reports, 2026-11-26 second session").
    fn fast_line(&mut self, index: usize, pc: usize, out: &mut StackBuf<1024>) {
        match self.fast_tail(pc) {
            Some(tail) => {
                format::fast_line_head(out, index);
                out.push_bytes(self.str(tail));
            }
            None => {
                let fr = self.frame(pc);
                self.with_resolved(&fr, |r| format::fast_line(out, index, r));
            }
        }
    }

    /// The full format's line, with what `malloc-debug run` adds to the pc's frame lines (asked
    /// with the fast line, `fast_tail`).
    fn full_line(&mut self, index: usize, pc: usize, out: &mut StackBuf<{ format::RECORD }>) {
        let fr = self.frame(pc);
        self.with_resolved(&fr, |r| format::full_line(out, index, r));
        #[cfg(not(target_os = "android"))]
        if super::annotating() {
            let _ = self.fast_tail(pc);
            if let Ok(i) = self.frame_index(pc)
                && let Some(a) = self.frames.as_slice()[i].annotation
            {
                out.push_bytes(self.str(a));
            }
        }
    }

    fn fast_line_parts(&mut self, index: usize, pc: usize, f: &mut dyn FnMut(&[&[u8]])) {
        let Some(tail) = self.fast_tail(pc) else {
            let mut line = StackBuf::<1024>::new();
            self.fast_line(index, pc, &mut line);
            let bytes = line.as_bytes();
            return f(&[bytes.strip_suffix(b"\n").unwrap_or(bytes)]);
        };
        let mut head = StackBuf::<1024>::new();
        format::fast_line_head(&mut head, index);
        let tail = self.str(tail);
        f(&[head.as_bytes(), tail.strip_suffix(b"\n").unwrap_or(tail)]);
    }
}

impl Symbolizer {
    /// The kept text of `pc`'s fast line after its frame number (`pc ...\n`), rendered once
    /// per distinct pc; `None` when it cannot be kept (too long, no memory): the line is then
    /// rendered each time.
    fn fast_tail(&mut self, pc: usize) -> Option<Str> {
        let i = self.frame_index(pc).ok()?;
        if let Some(t) = self.frames.as_slice()[i].fast_tail {
            return Some(t);
        }
        // The batch of requests takes 17 KiB of stack: only when there is a server to ask.
        // (Reports run on the library's own stack, docs/design.md "Reports run on a stack of
        // their own", so a small thread stack is not the limit.)
        #[cfg(not(target_os = "android"))]
        if super::annotating() {
            self.keep_queued();
            if self.frames.as_slice()[i].fast_tail.is_none() {
                self.keep_tails(&[i]);
            }
            return self.frames.as_slice()[i].fast_tail;
        }
        let line = self.render(i);
        self.keep_tail(i, &line)
    }

    /// Frame `i`'s fast line with frame number 0.
    fn render(&self, i: usize) -> StackBuf<1024> {
        let fr = self.frames.as_slice()[i];
        let mut line = StackBuf::<1024>::new();
        self.with_resolved(&fr, |r| format::fast_line(&mut line, 0, r));
        line
    }

    /// Keeps the text of `line` (frame `i`'s, with frame number 0) after the number.
    fn keep_tail(&mut self, i: usize, line: &StackBuf<1024>) -> Option<Str> {
        let mut head = StackBuf::<1024>::new();
        format::fast_line_head(&mut head, 0);
        let rendered = line.as_bytes().get(head.len()..).unwrap_or(&[]);
        let t = keep_in(&mut self.strings, rendered);
        if line.truncated() || t.1 as usize != rendered.len() {
            return None;
        }
        self.frames.as_mut_slice()[i].fast_tail = Some(t);
        Some(t)
    }

    /// Keeps the lines of the queued frames (at most a batch).
    #[cfg(not(target_os = "android"))]
    fn keep_queued(&mut self) {
        let mut batch = [0usize; super::annotate::BATCH];
        let n = self.queued.len().min(batch.len());
        for (b, &i) in batch.iter_mut().zip(self.queued.as_slice()) {
            *b = i as usize;
        }
        self.queued.truncate(0);
        self.keep_tails(&batch[..n]);
    }

    /// Renders and keeps the lines of the frames (indexes) in `frames` (at most
    /// `annotate::BATCH`) not kept yet, with what the annotation server adds to each, asked in
    /// one round trip.
    #[cfg(not(target_os = "android"))]
    fn keep_tails(&mut self, frames: &[usize]) {
        use super::annotate::{BATCH, Request};
        let mut requests: [Option<Request>; BATCH] = [const { None }; BATCH];
        let mut n = 0;
        for &i in frames.iter().take(BATCH) {
            let fr = self.frames.as_slice()[i];
            if fr.fast_tail.is_some() || requests[..n].iter().flatten().any(|r| r.frame == i) {
                continue;
            }
            // Only frames of a module with a file of its own, as the CLI annotates them.
            let module = (fr.has_map && fr.elf_start_offset == 0)
                .then(|| super::annotate::module_key(self.str(fr.map_name)));
            requests[n] = Some(Request {
                frame: i,
                module,
                line: self.render(i),
                added: 0,
            });
            n += 1;
        }
        self.annotator.annotate(&mut requests[..n]);
        for r in requests[..n].iter().flatten() {
            // The annotation alone too, for the full format (`Resolver::full_line`).
            let line = r.line.as_bytes();
            let end = line.len().saturating_sub(1);
            let added = line.get(end.saturating_sub(r.added)..end).unwrap_or(&[]);
            let kept = keep_in(&mut self.strings, added);
            self.frames.as_mut_slice()[r.frame].annotation = Some(kept);
            self.keep_tail(r.frame, &r.line);
        }
    }
}
