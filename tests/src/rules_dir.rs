//! A rules file laid out the way Kubernetes mounts a ConfigMap, updated the way
//! the kubelet updates it: by an atomic swap of the `..data` symlink.
//!
//! ```text
//! dir/..2026_01_01_00_00_00.000000001/rules.yaml   the real file, one dir per version
//! dir/..data -> ..2026_01_01_00_00_00.000000001    swapped atomically on update
//! dir/rules.yaml -> ..data/rules.yaml              the path the agent is given
//! ```

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// A ConfigMap-like directory holding one rules file.
#[derive(Debug)]
pub struct RulesDir {
    dir: PathBuf,
    file_name: String,
    generation: u32,
}

impl RulesDir {
    /// Lays out `dir` (which must exist) with `file_name` holding `content`.
    pub fn create(dir: &Path, file_name: &str, content: &str) -> RulesDir {
        let mut rules = RulesDir {
            dir: dir.to_path_buf(),
            file_name: file_name.to_string(),
            generation: 0,
        };
        rules.update(content);
        symlink(Path::new("..data").join(file_name), dir.join(file_name))
            .expect("create the rules file symlink");
        rules
    }

    /// The path to give the agent: `dir/<file_name>`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.file_name)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Replaces the content as the kubelet does: a new version directory, a
    /// temporary `..data_tmp` symlink to it renamed over `..data` (atomic), then
    /// the old version directory removed. Readers see the old file or the new
    /// one, never a partial write.
    pub fn update(&mut self, content: &str) {
        let old = fs::read_link(self.dir.join("..data")).ok();
        self.generation += 1;
        let version = format!("..2026_01_01_00_00_00.{:09}", self.generation);
        let version_dir = self.dir.join(&version);
        fs::create_dir(&version_dir).expect("create the version directory");
        fs::write(version_dir.join(&self.file_name), content).expect("write the rules");
        let tmp = self.dir.join("..data_tmp");
        let _ = fs::remove_file(&tmp);
        symlink(&version, &tmp).expect("create ..data_tmp");
        fs::rename(&tmp, self.dir.join("..data")).expect("swap ..data");
        if let Some(old) = old {
            fs::remove_dir_all(self.dir.join(old)).expect("remove the old version");
        }
    }

    /// The current content, read through the symlinks.
    pub fn content(&self) -> String {
        fs::read_to_string(self.path()).expect("read the rules through ..data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_swaps_the_data_link_and_drops_the_old_version() {
        let tmp = tempfile::tempdir().unwrap();
        let mut rules = RulesDir::create(tmp.path(), "rules.yaml", "one");
        assert_eq!(rules.content(), "one");
        assert!(fs::symlink_metadata(rules.path()).unwrap().is_symlink());
        let first = fs::read_link(tmp.path().join("..data")).unwrap();

        rules.update("two");
        assert_eq!(rules.content(), "two");
        let second = fs::read_link(tmp.path().join("..data")).unwrap();
        assert_ne!(first, second);
        assert!(!tmp.path().join(&first).exists());
        assert!(!tmp.path().join("..data_tmp").exists());
        let entries = fs::read_dir(tmp.path()).unwrap().count();
        assert_eq!(entries, 3, "rules.yaml, ..data and one version directory");
    }
}
