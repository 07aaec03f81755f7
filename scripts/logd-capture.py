#!/usr/bin/env python3
"""Stand-in for Android's logd: receives liblog's records and prints them like logcat.

Usage: logd-capture.py --socket PATH [--out FILE] [--ready FILE] [--format brief|threadtime]

Binds an AF_UNIX / SOCK_DGRAM socket at PATH (bind-mount its directory at /dev/socket inside an
Android root so that liblog finds /dev/socket/logdw), then prints every record as
    <priority letter> <tag>: <message>
(one line per message line, as logcat does) to stdout or FILE, flushed per record. Creates the
file given by --ready once the socket is bound. On SIGTERM/SIGINT it drains what is still queued
and exits 0.

Record layout (liblog logd_writer / logd's LogListener): an 11-byte header
    u8 log id, u16 tid, u32 realtime seconds, u32 realtime nanoseconds   (little endian, packed)
then, for text buffers, u8 priority, "tag\\0", "message\\0". Binary buffers (events, stats,
security) are printed as hex.

The kernel's receive queue for datagram sockets is small (net.unix.max_dgram_qlen, often 10) and
liblog writes non-blocking, so bursts can be dropped. When allowed, the socket is created in a
private network namespace whose queue length is raised (the limit is taken from the namespace the
receiving socket was created in; path-bound unix sockets are reachable from any namespace).
"""

import argparse
import ctypes
import datetime
import os
import select
import signal
import socket
import struct
import sys

PRIORITY_LETTERS = {0: "?", 1: "?", 2: "V", 3: "D", 4: "I", 5: "W", 6: "E", 7: "F", 8: "S"}
BINARY_LOG_IDS = {2: "events", 5: "stats", 6: "security"}
HEADER = struct.Struct("<BHII")
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
WANTED_QLEN = 4096


def _write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def raise_dgram_queue():
    """Best effort: move into a private network namespace with a long datagram queue."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNET if uid == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) != 0:
        return False
    try:
        if uid != 0:
            # Keep our own identity: map it to root inside the new user namespace.
            _write_file("/proc/self/setgroups", "deny")
            _write_file("/proc/self/uid_map", "0 %d 1" % uid)
            _write_file("/proc/self/gid_map", "0 %d 1" % gid)
        _write_file("/proc/sys/net/unix/max_dgram_qlen", str(WANTED_QLEN))
        return True
    except OSError:
        return False


def decode(data, fmt):
    """Returns the logcat-like lines of one datagram."""
    if len(data) < HEADER.size:
        return ["? logd-capture: short record (%d bytes)" % len(data)]
    log_id, tid, sec, nsec = HEADER.unpack_from(data)
    payload = data[HEADER.size:]
    if log_id in BINARY_LOG_IDS:
        return ["? %s: %s" % (BINARY_LOG_IDS[log_id], payload.hex())]
    if not payload:
        return []
    prio = payload[0]
    rest = payload[1:]
    nul = rest.find(b"\0")
    if nul < 0:
        tag, msg = rest, b""
    else:
        tag, msg = rest[:nul], rest[nul + 1:]
    end = msg.find(b"\0")
    if end >= 0:
        msg = msg[:end]
    tag_s = tag.decode("utf-8", "replace")
    msg_s = msg.decode("utf-8", "replace").rstrip("\n")
    letter = PRIORITY_LETTERS.get(prio, "?")
    if fmt == "threadtime":
        stamp = datetime.datetime.fromtimestamp(sec).strftime("%m-%d %H:%M:%S")
        prefix = "%s.%03d %5d %5d %s %s: " % (stamp, nsec // 1000000, 0, tid, letter, tag_s)
    else:
        prefix = "%s %s: " % (letter, tag_s)
    return [prefix + line for line in msg_s.split("\n")]


def main():
    ap = argparse.ArgumentParser(description="Receive Android log records on a logdw socket.")
    ap.add_argument("--socket", required=True, help="path to bind (…/logdw)")
    ap.add_argument("--out", help="write lines here instead of stdout")
    ap.add_argument("--ready", help="create this file once the socket is bound")
    ap.add_argument("--format", choices=("brief", "threadtime"), default="brief")
    args = ap.parse_args()

    raise_dgram_queue()
    try:
        os.unlink(args.socket)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    except OSError:
        pass
    sock.bind(args.socket)
    # liblog runs as any user inside the root: let every user connect.
    os.chmod(args.socket, 0o777)

    out = open(args.out, "a", buffering=1) if args.out else sys.stdout
    stopping = []

    def stop(_signum, _frame):
        stopping.append(True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.ready:
        _write_file(args.ready, "%d\n" % os.getpid())

    while True:
        try:
            readable, _, _ = select.select([sock], [], [], 0.1 if not stopping else 0)
        except InterruptedError:
            continue
        if not readable:
            if stopping:
                break
            continue
        data = sock.recv(65536)
        for line in decode(data, args.format):
            out.write(line + "\n")
        out.flush()
    sock.close()
    try:
        os.unlink(args.socket)
    except OSError:
        pass
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
