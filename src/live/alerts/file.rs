//! The JSON-lines file sink (`live_file`): one event a line, appended and flushed; the
//! file is opened for each event, so a rotated or removed file is created anew (0640, like
//! every store file, whatever the umask).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use super::{Deliver, Event};

pub struct FileSink {
    path: PathBuf,
}

impl FileSink {
    pub fn new(path: PathBuf) -> FileSink {
        FileSink { path }
    }
}

impl Deliver for FileSink {
    fn deliver(&mut self, ev: &Event, _abandon: &AtomicBool) -> Result<(), String> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(&self.path)
            .and_then(|mut f| writeln!(f, "{}", ev.json).and_then(|()| f.flush()))
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}
