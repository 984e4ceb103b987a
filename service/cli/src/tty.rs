//! The person's terminal (spec/decisions.md §12.3): a passphrase and a y/N answer are read only
//! from the controlling terminal `/dev/tty`, never from stdin, arguments or the environment, so
//! a process without a terminal — a hook, or an agent's tool call — cannot answer for the person.
//! Echo is off while a passphrase is typed and restored afterwards, also on error.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};

use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
use zeroize::Zeroizing;

use crate::error::CliError;

/// The controlling terminal's device.
pub const TERMINAL_PATH: &str = "/dev/tty";
/// Longest line read from the terminal, in bytes.
pub const TERMINAL_LINE_MAX_BYTES: usize = 4_096;

/// The controlling terminal, opened for reading and writing.
pub(crate) struct Terminal {
    file: File,
}

impl Terminal {
    /// Opens `/dev/tty`; refuses with a sentence saying why when the process has none.
    pub(crate) fn open(what: &str) -> Result<Terminal, CliError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(TERMINAL_PATH)
            .map(|file| Terminal { file })
            .map_err(|e| {
                CliError::NoTerminal(format!(
                    "{what} needs the person at their own terminal, and this process has no \
                     controlling terminal ({TERMINAL_PATH}: {e}); an answer or passphrase from \
                     stdin, arguments or the environment is never accepted instead"
                ))
            })
    }

    /// Reads one line a byte at a time: a buffer would swallow what the person types next.
    fn read_line(&mut self) -> Result<Zeroizing<String>, CliError> {
        let mut bytes = Zeroizing::new(Vec::new());
        let mut byte = [0u8; 1];
        loop {
            if self.file.read(&mut byte)? == 0 || byte[0] == b'\n' {
                break;
            }
            if bytes.len() == TERMINAL_LINE_MAX_BYTES {
                return Err(CliError::Usage(format!(
                    "a line typed at the terminal is longer than {TERMINAL_LINE_MAX_BYTES} bytes"
                )));
            }
            bytes.push(byte[0]);
        }
        while bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            CliError::Usage("what was typed at the terminal is not UTF-8".to_owned())
        })?;
        Ok(Zeroizing::new(text.to_owned()))
    }

    /// Writes `prompt` and reads one line with echo on.
    pub(crate) fn ask(&mut self, prompt: &str) -> Result<Zeroizing<String>, CliError> {
        self.file.write_all(prompt.as_bytes())?;
        self.file.flush()?;
        self.read_line()
    }

    /// Asks a y/N question; true only for an explicit yes.
    pub(crate) fn confirm(&mut self, prompt: &str) -> Result<bool, CliError> {
        let answer = self.ask(prompt)?;
        Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
    }

    /// Writes `prompt` and reads one line with echo off.
    ///
    /// Echo goes off, discarding anything typed ahead, before the prompt is shown: what the
    /// person types after seeing the prompt is then neither shown nor thrown away. (Showing the
    /// prompt first let a quick typist's passphrase be echoed and then flushed, leaving ctx
    /// waiting for a line that had already been typed.)
    pub(crate) fn passphrase(&mut self, prompt: &str) -> Result<Zeroizing<String>, CliError> {
        let saved = tcgetattr(&self.file).map_err(std::io::Error::from)?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        quiet.local_modes.insert(LocalModes::ECHONL);
        tcsetattr(&self.file, OptionalActions::Flush, &quiet).map_err(std::io::Error::from)?;
        let line = self
            .file
            .write_all(prompt.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(CliError::from)
            .and_then(|()| self.read_line());
        let restored = tcsetattr(&self.file, OptionalActions::Now, &saved);
        let line = line?;
        restored.map_err(std::io::Error::from)?;
        Ok(line)
    }

    /// Writes text for the person.
    pub(crate) fn say(&mut self, text: &str) -> Result<(), CliError> {
        self.file.write_all(text.as_bytes())?;
        self.file.flush()?;
        Ok(())
    }
}
