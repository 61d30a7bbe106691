//! [`Failure`]: why the daemon could not start or serve, and its exit
//! code. Shared by `daemon` (which reports it) and `mount` (which makes
//! most of them).

/// Why the daemon could not do its job: a message naming the problem and
/// the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn usage(m: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: m.into(),
        }
    }

    pub fn mount(m: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: m.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
