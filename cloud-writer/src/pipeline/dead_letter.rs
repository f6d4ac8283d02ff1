//! The dead-letter file: JSON lines appended, rotated to `FILE.1` when the next line would
//! take it past its cap, so that the two files hold at most twice the cap on disk. The
//! lines of the `FILE.1` a rotation replaces are counted as deleted. (Written here rather
//! than with a log-rotation crate: the count of deleted lines is what the metric needs, and
//! the rotation is a rename.)

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::config::DeadLetterSettings;

/// An open dead-letter file.
#[derive(Debug)]
pub struct DeadLetterFile {
    path: PathBuf,
    max_bytes: u64,
    out: BufWriter<File>,
    /// Bytes and lines in `path`.
    bytes: u64,
    lines: u64,
    /// Lines in `path.1`.
    previous_lines: u64,
}

impl DeadLetterFile {
    /// Opens (creates) the file for appending, counting what it and `FILE.1` hold.
    pub fn open(settings: &DeadLetterSettings) -> std::io::Result<Self> {
        let path = settings.file.clone();
        let out = append(&path)?;
        let bytes = out.get_ref().metadata()?.len();
        Ok(DeadLetterFile {
            lines: count_lines(&path)?,
            previous_lines: count_lines(&rotated(&path))?,
            path,
            max_bytes: settings.max_bytes,
            out,
            bytes,
        })
    }

    /// Appends `line` and a line break; the lines a rotation deleted.
    pub fn append(&mut self, line: &[u8]) -> std::io::Result<u64> {
        let size = line.len() as u64 + 1;
        let mut deleted = 0;
        if self.bytes > 0 && self.bytes + size > self.max_bytes {
            self.out.flush()?;
            std::fs::rename(&self.path, rotated(&self.path))?;
            self.out = append(&self.path)?;
            deleted = std::mem::replace(&mut self.previous_lines, self.lines);
            self.bytes = 0;
            self.lines = 0;
        }
        self.out.write_all(line)?;
        self.out.write_all(b"\n")?;
        self.bytes += size;
        self.lines += 1;
        Ok(deleted)
    }

    /// Flushes the buffered lines to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn append(path: &Path) -> std::io::Result<BufWriter<File>> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    Ok(BufWriter::new(file))
}

/// `FILE.1`.
fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// The lines of `path`, 0 when it does not exist.
fn count_lines(path: &Path) -> std::io::Result<u64> {
    match File::open(path) {
        Ok(file) => Ok(BufReader::new(file).split(b'\n').count() as u64),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn rotates_past_the_cap_and_counts_the_lines_it_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let settings = DeadLetterSettings {
            file: dir.path().join("dead.jsonl"),
            max_bytes: 20,
        };
        let mut file = DeadLetterFile::open(&settings).unwrap();
        // Nine bytes a line with its break: two fit in 20 bytes, the third rotates.
        for n in 0..4 {
            assert_eq!(file.append(format!("line-{n:03}").as_bytes()).unwrap(), 0);
        }
        file.flush().unwrap();
        assert_eq!(lines(&settings.file), ["line-002", "line-003"]);
        assert_eq!(lines(&rotated(&settings.file)), ["line-000", "line-001"]);
        // The next rotation replaces FILE.1: its two lines are deleted.
        assert_eq!(file.append(b"line-004").unwrap(), 2);
        file.flush().unwrap();
        assert_eq!(lines(&rotated(&settings.file)), ["line-002", "line-003"]);

        // A restart counts what is there: the next rotation deletes two lines again.
        drop(file);
        let mut file = DeadLetterFile::open(&settings).unwrap();
        assert_eq!(file.append(b"line-005").unwrap(), 0);
        assert_eq!(file.append(b"line-006").unwrap(), 2);
        file.flush().unwrap();
        assert_eq!(lines(&settings.file), ["line-006"]);
        assert_eq!(lines(&rotated(&settings.file)), ["line-004", "line-005"]);
    }

    #[test]
    fn a_line_longer_than_the_cap_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let settings = DeadLetterSettings {
            file: dir.path().join("dead.jsonl"),
            max_bytes: 4,
        };
        let mut file = DeadLetterFile::open(&settings).unwrap();
        file.append(b"longer than four").unwrap();
        file.flush().unwrap();
        assert_eq!(lines(&settings.file), ["longer than four"]);
    }
}
