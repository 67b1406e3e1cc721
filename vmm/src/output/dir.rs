//! The directory a command writes a set of files into (`vmm schema DIR`,
//! `vmm man --dir DIR`): created when missing, refused by name when
//! something else is at its path.

use std::path::Path;

/// Make `dir` (and its parents) unless it is already a directory.
///
/// `what` names the directory in messages (`schema directory`).
///
/// # Errors
///
/// [`crate::Error::Io`] naming `dir`: something other than a directory is
/// at its path (a file, a device, a symlink to one), or it cannot be
/// created (a parent is not a directory, no permission, a read-only file
/// system).
pub fn create_dir(dir: &Path, what: &str) -> Result<(), crate::Error> {
    // `create_dir_all` answers `EEXIST` ("File exists") for a file in the
    // way; say what is there instead. A symlink to a directory is followed,
    // as `mkdir -p` does.
    if let Ok(meta) = std::fs::metadata(dir) {
        if !meta.is_dir() {
            let kind = super::sys::kind_of(meta.file_type());
            return Err(crate::Error::io(format!("{what} {}", dir.display()))(
                std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    format!("{kind} is there, not a directory"),
                ),
            ));
        }
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(crate::Error::io(format!(
        "{what} {}: cannot create it",
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_in_the_way_is_named() {
        let e = create_dir(Path::new("/dev/null"), "schema directory").unwrap_err();
        assert_eq!(
            e.to_string(),
            "schema directory /dev/null: a character device is there, not a directory"
        );
    }

    #[test]
    fn a_file_as_a_parent_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let e = create_dir(&file.join("sub"), "schema directory").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("{}", file.join("sub").display())),
            "{msg}"
        );
        assert!(msg.contains("cannot create it"), "{msg}");
    }

    #[test]
    fn a_missing_directory_is_made_and_an_existing_one_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("a/b");
        create_dir(&d, "schema directory").unwrap();
        assert!(d.is_dir());
        create_dir(&d, "schema directory").unwrap();
    }
}
