//! Lines of a sampled-out run's trace, held (already serialized and redacted)
//! until the run ends and says whether its step records are kept: in memory
//! up to a bound, then in an anonymous temp file.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};

/// Held bytes kept in memory before they move to a temp file.
pub(super) const IN_MEMORY: usize = 4 << 20;

/// Tag of a held step record (dropped unless the steps are kept).
const STEP: u8 = b'S';
/// Tag of any other held line (always written).
const OTHER: u8 = b'O';

/// Held lines, in order, each tagged step or other.
#[derive(Default)]
pub(super) struct Held {
    memory: Vec<u8>,
    file: Option<BufWriter<File>>,
}

impl Held {
    /// Holds one serialized line (ending in `\n`).
    pub(super) fn push(&mut self, step: bool, line: &[u8]) -> std::io::Result<()> {
        let tag = if step { STEP } else { OTHER };
        if self.file.is_none() && self.memory.len() + line.len() + 1 > IN_MEMORY {
            let mut file = BufWriter::new(tempfile::tempfile()?);
            file.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(file);
        }
        match &mut self.file {
            Some(file) => {
                file.write_all(&[tag])?;
                file.write_all(line)
            }
            None => {
                self.memory.push(tag);
                self.memory.extend_from_slice(line);
                Ok(())
            }
        }
    }

    /// Writes what is held to `out`, step records only when `keep_steps`,
    /// and empties the hold.
    pub(super) fn release(
        &mut self,
        keep_steps: bool,
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        let keep = |line: &[u8]| line.first() != Some(&STEP) || keep_steps;
        match self.file.take() {
            Some(file) => {
                let mut file = file.into_inner().map_err(|e| e.into_error())?;
                file.seek(SeekFrom::Start(0))?;
                let mut reader = BufReader::new(file);
                let mut line = Vec::new();
                while reader.read_until(b'\n', &mut line)? > 0 {
                    if keep(&line) {
                        out.write_all(&line[1..])?;
                    }
                    line.clear();
                }
            }
            None => {
                for line in self.memory.split_inclusive(|b| *b == b'\n') {
                    if keep(line) {
                        out.write_all(&line[1..])?;
                    }
                }
                self.memory = Vec::new();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_lines(n: usize, len: usize) -> (Held, Vec<Vec<u8>>) {
        let mut held = Held::default();
        let mut lines = Vec::new();
        for i in 0..n {
            let mut line = format!("{i:>width$}", width = len - 1).into_bytes();
            line.push(b'\n');
            held.push(i % 2 == 0, &line).unwrap();
            lines.push(line);
        }
        (held, lines)
    }

    /// Past the memory bound the lines go to a temp file and come back in
    /// order, steps dropped or kept as asked.
    #[test]
    fn held_lines_come_back_in_order_from_memory_or_the_spill_file() {
        for (n, len) in [(10, 20), (IN_MEMORY / 1000 + 100, 1000)] {
            for keep in [false, true] {
                let (mut held, lines) = held_lines(n, len);
                assert_eq!(held.file.is_some(), n * len > IN_MEMORY);
                let mut out = Vec::new();
                held.release(keep, &mut out).unwrap();
                let want: Vec<u8> = lines
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| keep || i % 2 == 1)
                    .flat_map(|(_, l)| l.clone())
                    .collect();
                assert!(out == want, "n={n} keep={keep}");
            }
        }
    }
}
