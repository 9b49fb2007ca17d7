//! Moving bytes from one socket to another through a pipe, never through user space
//! (`splice(2)`): the TCP proxy's copy. A [`Pipe`] is filled from a socket and drained into
//! another; the kernel moves page references, not bytes, where it can (TCP's receive queue
//! into the pipe, the pipe into TCP's send queue), and copies where it must.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A non-blocking pipe and how many bytes it holds now.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    held: usize,
}

impl Pipe {
    /// A new, empty pipe (two descriptors, close-on-exec, both ends non-blocking), with the
    /// kernel's default capacity (16 pages).
    pub fn new() -> io::Result<Self> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the live two-element array `fds`.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: on success both are new descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Self {
            read,
            write,
            held: 0,
        })
    }

    /// Bytes in the pipe, moved in and not yet out.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Moves up to `max` bytes from the socket `from` into the pipe: `Ok(0)` is the end of
    /// the socket's stream (or `max` 0); `WouldBlock` when the socket has nothing (or the pipe
    /// is full).
    pub fn fill(&mut self, from: BorrowedFd<'_>, max: usize) -> io::Result<usize> {
        let n = splice(from.as_raw_fd(), self.write.as_raw_fd(), max)?;
        self.held += n;
        Ok(n)
    }

    /// Moves what the pipe holds into the socket `to`, as much as it takes: `WouldBlock`
    /// when it takes nothing now.
    pub fn drain(&mut self, to: BorrowedFd<'_>) -> io::Result<usize> {
        if self.held == 0 {
            return Ok(0);
        }
        let n = splice(self.read.as_raw_fd(), to.as_raw_fd(), self.held)?;
        self.held -= n;
        Ok(n)
    }
}

fn splice(from: i32, to: i32, len: usize) -> io::Result<usize> {
    // SAFETY: no memory is passed (null offsets: both ends are streams); the descriptors are
    // borrowed live ones of the caller's.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn bytes_cross_from_one_socket_to_another_whole_and_in_order() {
        // a → b ⇒ (pipe) ⇒ c → d
        let (mut a, b) = pair();
        let (c, mut d) = pair();
        b.set_nonblocking(true).unwrap();
        let mut p = Pipe::new().unwrap();
        // nothing to read yet: WouldBlock, nothing held
        let e = p.fill(b.as_fd(), 1 << 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                a.write_all(&data).unwrap();
                // end of stream, seen as fill() == 0
            })
        };
        let mut moved = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            d.read_to_end(&mut got).unwrap();
            got
        });
        loop {
            assert!(std::time::Instant::now() < deadline, "moved {moved}");
            match p.fill(b.as_fd(), 1 << 16) {
                Ok(0) => break,
                Ok(n) => assert_eq!(p.held(), n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                Err(e) => panic!("{e}"),
            }
            while p.held() > 0 {
                moved += p.drain(c.as_fd()).unwrap();
            }
        }
        writer.join().unwrap();
        assert_eq!(moved, data.len());
        drop(c);
        assert_eq!(reader.join().unwrap(), data);
        assert_eq!(
            p.drain(b.as_fd()).unwrap(),
            0,
            "an empty pipe drains nothing"
        );
    }
}
