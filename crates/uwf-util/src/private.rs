//! Files and directories only their owner may read: what uwf creates.
//!
//! A storage root holds API keys in `.env`, agents' output in the CAS and
//! in `logs/`, and the state of every thread; nothing of it is for other
//! users of the machine. So every file uwf creates gets mode
//! [`FILE_MODE`] (`0600`) and every directory [`DIR_MODE`] (`0700`), set
//! when it is created, whatever the umask (a umask only ever removes
//! bits, so it cannot widen them). Something that already exists keeps
//! its mode: uwf never changes the permissions of a directory the user
//! made (a root they pointed `--root` at) or of a file it replaces (see
//! `docs/state.md`, "Secrets and file modes").

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

/// The mode of every file uwf creates: read and write for the owner only.
pub const FILE_MODE: u32 = 0o600;

/// The mode of every directory uwf creates: the owner only.
pub const DIR_MODE: u32 = 0o700;

/// `fs::create_dir_all` with [`DIR_MODE`] for each directory it creates;
/// existing ones (`path` itself or any parent) are left as they are.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DIR_MODE);
    }
    builder.create(path)
}

/// `OpenOptions` whose files, when created, get [`FILE_MODE`]; set the
/// access flags as usual (`.append(true).create(true)`).
pub fn open_options() -> OpenOptions {
    #[allow(unused_mut)]
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE);
    }
    options
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_private_directories_and_leaves_existing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("mine");
        fs::create_dir(&mine).unwrap();
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o755)).unwrap();
        let deep = mine.join("a").join("b");
        create_dir_all(&deep).unwrap();
        assert_eq!(mode(&mine.join("a")), 0o700);
        assert_eq!(mode(&deep), 0o700);
        assert_eq!(mode(&mine), 0o755, "an existing directory keeps its mode");
        create_dir_all(&deep).unwrap();
        assert_eq!(mode(&deep), 0o700);
    }

    #[test]
    fn creates_private_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        open_options().append(true).create(true).open(&p).unwrap();
        assert_eq!(mode(&p), 0o600);
        // An existing file keeps its mode.
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        open_options().append(true).create(true).open(&p).unwrap();
        assert_eq!(mode(&p), 0o640);
    }
}
