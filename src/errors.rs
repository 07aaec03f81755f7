//! Bionic's `strerror` texts. Messages must read the same on every platform
//! (docs/spec/errors.md#conventions), and
//! glibc's `strerror` differs in wording (and may allocate for unknown codes).

pub fn strerror(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "Operation not permitted",
        libc::ENOENT => "No such file or directory",
        libc::EINTR => "Interrupted system call",
        libc::EIO => "I/O error",
        libc::EBADF => "Bad file descriptor",
        libc::EAGAIN => "Try again",
        libc::ENOMEM => "Out of memory",
        libc::EACCES => "Permission denied",
        libc::EFAULT => "Bad address",
        libc::EBUSY => "Device or resource busy",
        libc::EEXIST => "File exists",
        libc::ENOTDIR => "Not a directory",
        libc::EISDIR => "Is a directory",
        libc::EINVAL => "Invalid argument",
        libc::ENFILE => "File table overflow",
        libc::EMFILE => "Too many open files",
        libc::ETXTBSY => "Text file busy",
        libc::EFBIG => "File too large",
        libc::ENOSPC => "No space left on device",
        libc::ESPIPE => "Illegal seek",
        libc::EROFS => "Read-only file system",
        libc::EPIPE => "Broken pipe",
        libc::ERANGE => "Math result not representable",
        libc::ENAMETOOLONG => "File name too long",
        libc::ENOSYS => "Function not implemented",
        libc::ELOOP => "Too many symbolic links encountered",
        libc::EDQUOT => "Quota exceeded",
        _ => "Unknown error",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bionic_wording() {
        assert_eq!(
            super::strerror(libc::ERANGE),
            "Math result not representable"
        );
        assert_eq!(
            super::strerror(libc::ELOOP),
            "Too many symbolic links encountered"
        );
    }
}
