//! The annotation server of `malloc-debug run`: the library asks it for the text to append to a
//! frame line (`  FUNCTION at FILE:LINE`, see `logsym`) as it renders the line, so the log goes
//! straight from the program to its stderr instead of through a pipe the CLI scans.
//!
//! Why: a report is tens of thousands of frame lines naming a few hundred pcs. Piped, every
//! byte of it crossed a pipe and was scanned and written again by the CLI: node's exit report
//! (44 MB) cost the CLI 35 ms of CPU, 0.4-0.6x of node's own run (docs/performance.md, "Leak
//! reports, 2026-11-26 fourth session"). Asked, the library sends one request per distinct
//! frame of a report (it keeps each pc's rendered line, src/symbolize), and none at all for a
//! module the server says has no line information.
//!
//! Protocol (a Unix stream socket whose path the library finds in [`SOCKET_ENV`]; one
//! connection per symbolizer of each process): a request is one frame line as the library
//! prints it, without the log prefix, ending in `\n`; the answer is one line: `+TEXT` (append
//! TEXT, which starts with two blanks), `=` (nothing for this pc) or `-` (nothing for any pc of
//! this line's module: it has no line information, or cannot be read).
//!
//! One thread serves every connection with `poll`; the symbolizer is the one `symbolize` and
//! the pipe use (`LogSymbolizer`), so a line annotated here reads exactly as one annotated there.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::logsym::{Annotation, LogSymbolizer};

/// The environment variable that tells the library where the server listens (read by
/// src/symbolize/annotate.rs).
pub const SOCKET_ENV: &str = "MALLOC_DEBUG_ANNOTATE_SOCKET";

/// A running server; its socket and directory are removed when it is dropped.
pub struct Server {
    dir: PathBuf,
    socket: PathBuf,
}

impl Server {
    /// Binds a socket in a fresh private directory and serves it on a thread of its own
    /// (detached: it lives until the CLI exits).
    pub fn start(symbols: Option<PathBuf>) -> std::io::Result<Server> {
        let dir = crate::run_gate::unique_temp_path("malloc-debug-annotate.");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let socket = dir.join("annotate");
        let listener = match UnixListener::bind(&socket) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        std::thread::Builder::new()
            .name("annotate".into())
            .spawn(move || serve(listener, LogSymbolizer::new(symbols)))?;
        Ok(Server { dir, socket })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

struct Client {
    stream: UnixStream,
    /// Bytes of a request not complete yet.
    pending: Vec<u8>,
}

fn serve(listener: UnixListener, mut sym: LogSymbolizer) {
    let mut clients: Vec<Client> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(clients.iter().map(|c| c.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd for its length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let mut closed = Vec::new();
        for (i, p) in fds.iter().enumerate().skip(1) {
            if p.revents == 0 {
                continue;
            }
            let client = &mut clients[i - 1];
            match client.stream.read(&mut buf) {
                Ok(0) | Err(_) => closed.push(i - 1),
                Ok(got) => {
                    client.pending.extend_from_slice(&buf[..got]);
                    if answer(client, &mut sym).is_err() {
                        closed.push(i - 1);
                    }
                }
            }
        }
        for i in closed.into_iter().rev() {
            clients.swap_remove(i);
        }
        if fds[0].revents != 0
            && let Ok((stream, _)) = listener.accept()
        {
            clients.push(Client {
                stream,
                pending: Vec::new(),
            });
        }
    }
}

/// Answers every complete request of `client`, in one write.
fn answer(client: &mut Client, sym: &mut LogSymbolizer) -> std::io::Result<()> {
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(nl) = client.pending[start..].iter().position(|&b| b == b'\n') {
        let line = &client.pending[start..start + nl];
        match sym.annotate(line) {
            Annotation::Append(text) => {
                out.push(b'+');
                out.extend_from_slice(text.as_bytes());
            }
            Annotation::Nothing => out.push(b'='),
            Annotation::NothingInModule => out.push(b'-'),
        }
        out.push(b'\n');
        start += nl + 1;
    }
    client.pending.drain(..start);
    client.stream.write_all(&out)
}
