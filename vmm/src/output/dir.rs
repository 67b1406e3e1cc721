//! The directory a command writes a set of files into (`vmm schema DIR`,
//! `vmm man --dir DIR`): created when missing, refused by name when
//! something else is at its path.

use std::path::Path;

use super::WriteError;

/// Make `dir` (and its parents) unless it is already a directory.
///
/// # Errors
///
/// `WriteError::Dash`: `dir` is `-` (standard output elsewhere; `./-` is a
/// directory named so).
/// `WriteError::NotADirectory`: something other than a directory is at
/// its path (a file, a device, a symlink to one).
/// `WriteError::CreateDir`: it cannot be created (a parent is not a
/// directory, no permission, a read-only file system).
pub fn create_dir(dir: &Path) -> Result<(), WriteError> {
    if dir.as_os_str() == "-" {
        return Err(WriteError::Dash);
    }
    // `create_dir_all` answers `EEXIST` ("File exists") for a file in the
    // way; say what is there instead. A symlink to a directory is followed,
    // as `mkdir -p` does.
    if let Ok(meta) = std::fs::metadata(dir) {
        if !meta.is_dir() {
            return Err(WriteError::NotADirectory {
                path: dir.to_path_buf(),
                kind: crate::input::kind_of(meta.file_type()),
            });
        }
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|source| WriteError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dash_is_not_made_a_directory() {
        let e = create_dir(Path::new("-")).unwrap_err();
        assert!(matches!(e, WriteError::Dash), "{e}");
        assert!(!Path::new("-").exists());
    }

    #[test]
    fn a_device_in_the_way_is_named() {
        let e = create_dir(Path::new("/dev/null")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/null is a character device, not a directory"
        );
    }

    #[test]
    fn a_file_as_a_parent_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let sub = file.join("sub");
        let msg = create_dir(&sub).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("cannot create directory {}: ", sub.display())),
            "{msg}"
        );
    }

    #[test]
    fn a_missing_directory_is_made_and_an_existing_one_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("a/b");
        create_dir(&d).unwrap();
        assert!(d.is_dir());
        create_dir(&d).unwrap();
    }
}
