//! Socket tricks std does not offer on stable: closing with an RST.
//!
//! `TcpStream::set_linger` is unstable (`tcp_linger`), and only std, serde
//! and serde_json may be used, so on Linux and the BSDs/macOS `SO_LINGER` is
//! set to {on, 0 s} with a direct `setsockopt` call (libc is linked by std
//! anyway). Closing such a socket sends RST instead of FIN: the client's
//! next read or write fails with "connection reset by peer". Elsewhere the
//! fallback is `shutdown(Both)`, which the client sees as a clean EOF.

use std::net::TcpStream;

#[cfg(all(
    unix,
    any(
        all(
            target_os = "linux",
            any(
                target_arch = "x86_64",
                target_arch = "x86",
                target_arch = "aarch64",
                target_arch = "arm",
                target_arch = "riscv64"
            )
        ),
        target_os = "macos",
        target_os = "freebsd"
    )
))]
mod imp {
    use std::os::raw::{c_int, c_void};
    use std::os::unix::io::AsRawFd;

    #[cfg(target_os = "linux")]
    const SOL_SOCKET: c_int = 1;
    #[cfg(target_os = "linux")]
    const SO_LINGER: c_int = 13;
    #[cfg(not(target_os = "linux"))]
    const SOL_SOCKET: c_int = 0xffff;
    #[cfg(not(target_os = "linux"))]
    const SO_LINGER: c_int = 0x0080;

    #[repr(C)]
    struct Linger {
        l_onoff: c_int,
        l_linger: c_int,
    }

    extern "C" {
        fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: u32) -> c_int;
    }

    /// Sets SO_LINGER {1, 0}; true on success.
    pub fn linger_zero(s: &super::TcpStream) -> bool {
        let l = Linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: `fd` is a live socket owned by `s`; `l` is a valid
        // `struct linger` that outlives the call, and its size is passed.
        let rc = unsafe {
            setsockopt(
                s.as_raw_fd(),
                SOL_SOCKET,
                SO_LINGER,
                &l as *const Linger as *const c_void,
                std::mem::size_of::<Linger>() as u32,
            )
        };
        rc == 0
    }
}

#[cfg(not(all(
    unix,
    any(
        all(
            target_os = "linux",
            any(
                target_arch = "x86_64",
                target_arch = "x86",
                target_arch = "aarch64",
                target_arch = "arm",
                target_arch = "riscv64"
            )
        ),
        target_os = "macos",
        target_os = "freebsd"
    )
)))]
mod imp {
    pub fn linger_zero(_s: &super::TcpStream) -> bool {
        false
    }
}

/// Prepares `s` so that closing it (dropping every handle) sends RST.
/// Returns false if that is not possible here; the socket is then shut down
/// normally (FIN) instead.
pub fn reset_on_close(s: &TcpStream) -> bool {
    if imp::linger_zero(s) {
        true
    } else {
        let _ = s.shutdown(std::net::Shutdown::Both);
        false
    }
}
