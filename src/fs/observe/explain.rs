//! The log lines that explain a refusal the caller sees only as an errno
//! it cannot understand alone: "Invalid or incomplete multibyte or wide
//! character" from `cp notes.cu8 view/`, "Read-only file system" on a
//! read-write mount, "Operation not supported" from a fallocate mode. Each
//! names the file, why, and what to do. A user can cause them again and
//! again, so they go through `crate::ratelog` (per kind and file). The
//! errno itself is decided in `error` (the view's errors) as before; the
//! write path and the operations call these where they refuse.

use crate::ratelog;

/// A write refused with EILSEQ because it would make a raw file begin
/// with the magic number.
pub fn magic_on_raw(name: &str) {
    ratelog::warn("refused-magic", name, || {
        format!(
            "{name}: refused a write (EILSEQ) that would make this raw file begin with the \
             Corrected UTF-8 magic number: it would read back as something else (the \
             writer sees \"Invalid or incomplete multibyte or wide character\"). To bring a \
             Corrected UTF-8 file in, copy it into BACKING directly, or decode it first \
             (cutf8 decode FILE > VIEW/FILE) and copy the result into the mount."
        )
    });
}

/// A corrected file turned raw because a write held content Corrected
/// UTF-8 cannot store (`why`); nothing was refused or lost.
pub fn now_raw(name: &str, why: &dyn std::fmt::Display) {
    ratelog::warn("now-raw", name, || {
        format!(
            "{name}: {why}; the file is now raw (stored as it reads), so nothing written \
             is lost"
        )
    });
}

/// An open for writing refused with EROFS: the file's view cannot be
/// written back unchanged.
pub fn read_only_view(name: &str) {
    ratelog::warn("refused-read-only", name, || {
        format!(
            "{name}: opened for writing and refused (EROFS, \"Read-only file system\", on a \
             read-write mount): this corrected file holds a reserved unit of FE and six or \
             more continuation bytes that reads as an extended form, so its view cannot be \
             written back unchanged. Read it through the mount, or change it in BACKING \
             (cutf8 decode --lossless, edit, cutf8 encode --lossless)."
        )
    });
}

/// A fallocate mode refused with EOPNOTSUPP on a corrected file.
pub fn fallocate_mode(name: &str, mode: i32) {
    ratelog::warn("refused-fallocate", name, || {
        format!(
            "{name}: fallocate mode {mode:#x} refused (EOPNOTSUPP): on a corrected file \
             only allocation, punching holes with KEEP_SIZE and zeroing ranges are \
             supported (collapsing or inserting ranges would shift the view's \
             characters); the file is unchanged"
        )
    });
}
