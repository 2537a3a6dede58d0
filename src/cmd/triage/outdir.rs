//! The report directory of `capsule triage -o DIR`: after a run it holds exactly that run's
//! report, and never loses a file triage did not write.
//!
//! ```text
//! begin(DIR)   DIR absent, an empty directory, or a previous triage report (its
//!              manifest.json lists every file in it; a report from before the manifest:
//!              only triage's own names) -- else a usage error naming the stranger file
//!              -> the report is written into a staging sibling, .DIR.triage-PID
//! commit()     manifest.json (every file written) -> DIR absent: the staging directory
//!              renamed to DIR; else the previous report's entries moved to a sibling
//!              (.DIR.triage-new-PID.old), the new ones moved in (DIR itself stays: its
//!              mode, a shell's working directory in it), the previous report removed
//! drop         without commit: the staging directory removed (all of it is this run's)
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::output::Usage;

/// The file naming every file of a report, beside the report.
pub(crate) const MANIFEST: &str = "manifest.json";

/// The files of a report from before the manifest, beside `evidence/NN-RULE.pcapng`.
const LEGACY: &[&str] = &["findings.json", "report.txt", "report.html"];

/// A report being written: [`Staging::dir`] until [`Staging::commit`] puts it at its place.
pub(crate) struct Staging {
    dest: PathBuf,
    tmp: PathBuf,
    /// The previous report's files (relative), when `dest` holds one.
    previous: Option<Vec<String>>,
    committed: bool,
}

impl Staging {
    /// Checks `dest` and makes the staging directory (with `evidence/`).
    pub(crate) fn begin(dest: &Path) -> Result<Staging> {
        let dest = match std::fs::symlink_metadata(dest) {
            Ok(_) => std::fs::canonicalize(dest)
                .with_context(|| format!("cannot resolve {}", dest.display()))?,
            Err(_) => dest.to_path_buf(),
        };
        let previous = previous_report(&dest)?;
        let name = dest.file_name().ok_or_else(|| {
            Usage(format!(
                "-o {}: the report directory needs a name of its own",
                dest.display()
            ))
        })?;
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let sibling = |what: &str| {
            let mut n = std::ffi::OsString::from(".");
            n.push(name);
            n.push(format!(".triage-{what}-{}", std::process::id()));
            parent.join(n)
        };
        let tmp = sibling("new");
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        // A staging directory of this pid is a crashed run's (pids are reused): ours.
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("evidence"))
            .with_context(|| format!("cannot create {}", tmp.join("evidence").display()))?;
        Ok(Staging {
            dest,
            tmp,
            previous,
            committed: false,
        })
    }

    /// Where the report is written until it is committed.
    pub(crate) fn dir(&self) -> &Path {
        &self.tmp
    }

    /// Writes the manifest and puts the report at its place, replacing the previous one.
    pub(crate) fn commit(mut self) -> Result<()> {
        let mut files = files_under(&self.tmp)?;
        files.push(MANIFEST.to_string());
        files.sort();
        let manifest = serde_json::json!({
            "written_by": "capsule triage",
            "version": env!("CARGO_PKG_VERSION"),
            "files": files,
        });
        let path = self.tmp.join(MANIFEST);
        std::fs::write(&path, format!("{manifest:#}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        if std::fs::symlink_metadata(&self.dest).is_err() {
            std::fs::rename(&self.tmp, &self.dest).with_context(|| {
                format!(
                    "cannot rename {} to {}",
                    self.tmp.display(),
                    self.dest.display()
                )
            })?;
            self.committed = true;
            return Ok(());
        }
        // DIR itself stays (its owner, its mode, a shell's working directory in it): the
        // previous report's entries are moved out to a sibling, the new one's moved in.
        let mv = |from: &Path, to: &Path| {
            std::fs::rename(from, to)
                .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))
        };
        let old = match &self.previous {
            Some(previous) => {
                let mut n = self.tmp.clone().into_os_string();
                n.push(".old");
                let old = PathBuf::from(n);
                std::fs::create_dir(&old)
                    .with_context(|| format!("cannot create {}", old.display()))?;
                let mut top: Vec<&str> = previous
                    .iter()
                    .map(|f| f.split('/').next().unwrap_or(f))
                    .collect();
                if self.dest.join("evidence").is_dir() {
                    top.push("evidence");
                }
                top.dedup();
                top.sort_unstable();
                top.dedup();
                for name in top {
                    mv(&self.dest.join(name), &old.join(name))?;
                }
                Some(old)
            }
            None => None,
        };
        for e in std::fs::read_dir(&self.tmp)
            .with_context(|| format!("cannot read {}", self.tmp.display()))?
        {
            let name = e
                .with_context(|| format!("cannot read {}", self.tmp.display()))?
                .file_name();
            mv(&self.tmp.join(&name), &self.dest.join(&name))?;
        }
        self.committed = true;
        std::fs::remove_dir(&self.tmp)
            .with_context(|| format!("cannot remove {}", self.tmp.display()))?;
        if let (Some(old), Some(previous)) = (old, &self.previous) {
            remove_report(&old, previous).with_context(|| {
                format!(
                    "the new report is in {}; the previous one, moved to {}, could not be \
                     removed",
                    self.dest.display(),
                    old.display()
                )
            })?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// The files (relative, sorted) of the previous report in `dest`: `None` when `dest` is
/// absent or empty; a usage error when it holds anything triage did not write.
fn previous_report(dest: &Path) -> Result<Option<Vec<String>>> {
    let meta = match std::fs::symlink_metadata(dest) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dest.display())),
    };
    if !meta.is_dir() {
        return Err(Usage(format!(
            "-o {}: not a directory (triage writes a report directory)",
            dest.display()
        ))
        .into());
    }
    let empty = std::fs::read_dir(dest)
        .with_context(|| format!("cannot read {}", dest.display()))?
        .next()
        .is_none();
    if empty {
        return Ok(None);
    }
    let files = files_under(dest)?;
    let listed: Option<Vec<String>> = match std::fs::read(dest.join(MANIFEST)) {
        Ok(data) => {
            let doc: serde_json::Value = serde_json::from_slice(&data).ok().unwrap_or_default();
            doc.get("files").and_then(|f| f.as_array()).map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect()
            })
        }
        Err(_) => None,
    };
    let ours = |f: &str| match &listed {
        Some(l) => l.iter().any(|x| x == f),
        None => LEGACY.contains(&f) || f.strip_prefix("evidence/").is_some_and(evidence_name),
    };
    if let Some(stranger) = files.iter().find(|f| !ours(f)) {
        return Err(Usage(format!(
            "-o {}: it holds {stranger}, which capsule triage did not write; the report \
             directory must be absent, empty or a previous triage report (it is replaced \
             whole): choose another directory or move the file away",
            dest.display()
        ))
        .into());
    }
    if let Some(dir) = subdirs(dest)?.into_iter().find(|d| d != "evidence") {
        return Err(Usage(format!(
            "-o {}: it holds the directory {dir}, which capsule triage did not make; the \
             report directory must be absent, empty or a previous triage report",
            dest.display()
        ))
        .into());
    }
    Ok(Some(files))
}

/// `NN-RULE.pcapng`, the name of an evidence file.
fn evidence_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".pcapng") else {
        return false;
    };
    let Some((n, rule)) = stem.split_once('-') else {
        return false;
    };
    n.len() >= 2
        && n.bytes().all(|b| b.is_ascii_digit())
        && capsule_config::ALERT_RULES.contains(&rule)
}

/// Every file (not directory) under `dir`, relative with `/`, sorted; a symlink is a file.
fn files_under(dir: &Path) -> Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e.with_context(|| format!("cannot read {}", dir.display()))?;
            let path = e.path();
            let ty = e
                .file_type()
                .with_context(|| format!("cannot read {}", path.display()))?;
            if ty.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// The directories (relative, with `/`) under `dir`.
fn subdirs(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot read {}", d.display()))? {
            let e = e.with_context(|| format!("cannot read {}", d.display()))?;
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let path = e.path();
                let rel = path.strip_prefix(dir).unwrap_or(&path);
                out.push(rel.to_string_lossy().replace('\\', "/"));
                todo.push(path);
            }
        }
    }
    Ok(out)
}

/// Removes the `files` of a report moved to `dir`, then its directories: a file put there
/// since is left (and the directory with it).
fn remove_report(dir: &Path, files: &[String]) -> Result<()> {
    for f in files {
        let path = dir.join(f);
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    let evidence = dir.join("evidence");
    if evidence.exists() {
        std::fs::remove_dir(&evidence)
            .with_context(|| format!("cannot remove {}", evidence.display()))?;
    }
    std::fs::remove_dir(dir).with_context(|| format!("cannot remove {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(dir: &Path, rel: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, rel).unwrap();
    }

    #[test]
    fn a_report_replaces_the_previous_and_refuses_strangers() {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("out");
        // Absent: made.
        let s = Staging::begin(&dest).unwrap();
        put(s.dir(), "report.txt");
        put(s.dir(), "evidence/01-dscp.pcapng");
        s.commit().unwrap();
        assert_eq!(
            files_under(&dest).unwrap(),
            ["evidence/01-dscp.pcapng", "manifest.json", "report.txt"]
        );
        // A previous report: replaced whole, in the same directory (a shell in it stays).
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(&dest).unwrap().ino();
        let s = Staging::begin(&dest).unwrap();
        put(s.dir(), "report.txt");
        s.commit().unwrap();
        assert_eq!(files_under(&dest).unwrap(), ["manifest.json", "report.txt"]);
        assert_eq!(std::fs::metadata(&dest).unwrap().ino(), ino);
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
        // A stranger: refused, nothing touched, no staging left.
        put(&dest, "evidence/notes.md");
        let e = Staging::begin(&dest).err().unwrap();
        assert!(
            e.is::<Usage>() && e.to_string().contains("evidence/notes.md"),
            "{e}"
        );
        assert_eq!(files_under(&dest).unwrap().len(), 3);
        // A report from before the manifest: only triage's names.
        let legacy = t.path().join("legacy");
        put(&legacy, "findings.json");
        put(&legacy, "evidence/12-tcp_retransmissions.pcapng");
        assert!(previous_report(&legacy).unwrap().is_some());
        put(&legacy, "evidence/12-notarule.pcapng");
        assert!(previous_report(&legacy).is_err());
        // An empty directory is taken; a dropped staging leaves nothing.
        let empty = t.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        drop(Staging::begin(&empty).unwrap());
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }
}
