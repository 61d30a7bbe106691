//! Errors of writes the daemon makes for a writer after its write(2) has
//! returned — the bytes `write::Held` kept back, written later by whatever
//! settles them first — reported once to every handle that was open when
//! they were lost, as the kernel's `errseq_t` reports write-back errors to
//! every open file. Without it, the handle whose request happened to write
//! the bytes (another process's close, a reader's read) takes the error,
//! and the writer's own close(2) succeeds: it never learns its file lacks
//! its last bytes.
//!
//! One `u64` per open file (in `content::Content`, under its lock): how
//! many losses so far in the high 32 bits, the last one's errno in the low
//! 32. Each handle samples it at open; its fsync, and the close(2) of a
//! handle open for writing, report the errno when the count moved since,
//! and move the handle's sample on (`handles::FileHandle`).

use std::sync::atomic::{AtomicU64, Ordering};

/// The losses of one open file so far (count and last errno).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lost(u64);

impl Lost {
    /// One more loss, of errno `code`.
    pub fn record(&mut self, code: i32) {
        let count = (self.0 >> 32).wrapping_add(1) & 0xffff_ffff;
        self.0 = count << 32 | u64::from(code as u32);
    }

    fn count(self) -> u64 {
        self.0 >> 32
    }

    fn code(self) -> i32 {
        self.0 as u32 as i32
    }
}

/// What one handle has been told so far.
#[derive(Debug, Default)]
pub struct ErrorsTold(AtomicU64);

impl ErrorsTold {
    /// Sampled at open: losses before it are not the handle's.
    pub fn at(now: Lost) -> ErrorsTold {
        ErrorsTold(AtomicU64::new(now.0))
    }

    /// The errno of a loss since the handle last asked, once.
    pub fn take(&self, now: Lost) -> Option<i32> {
        let before = Lost(self.0.swap(now.0, Ordering::AcqRel));
        (before.count() != now.count()).then(|| now.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handle_is_told_once_and_only_of_losses_after_its_open() {
        let mut lost = Lost::default();
        let early = ErrorsTold::at(lost);
        lost.record(libc::ENOSPC);
        let late = ErrorsTold::at(lost);
        assert_eq!(early.take(lost), Some(libc::ENOSPC));
        assert_eq!(early.take(lost), None);
        assert_eq!(late.take(lost), None);
        lost.record(libc::EIO);
        assert_eq!(early.take(lost), Some(libc::EIO));
        assert_eq!(late.take(lost), Some(libc::EIO));
    }
}
