//! What the user types: a line editor at the idle prompt, plain lines while a reply runs.
//!
//! At the prompt, `rustyline` edits the line (arrows, history, Ctrl-R) with bracketed paste
//! on, so a pasted block of several lines is one message: the terminal marks the paste and
//! the editor inserts it whole, newlines included, until Enter. While a reply streams the
//! terminal stays in its ordinary (cooked) mode, so Ctrl-C reaches the process as SIGINT
//! and interrupts the reply, and a line typed then (`/queue TEXT`) is read as it is
//! completed. Both run on one thread of their own: the editor blocks, and the runtime must
//! not. A Ctrl-C pressed while the prompt is being put up comes either way: as a SIGINT
//! while the terminal is still cooked, as a key once the editor made it raw.
//!
//! At the prompt Ctrl-C first clears a half-typed line, as a shell's does; on an empty
//! line it is reported ([`Typed::Interrupted`]), and the prompt exits.
//!
//! The editor's history is kept across runs ([`super::history`]): loaded when the editor
//! starts, each line appended as it is entered.
//!
//! When standard input is not a terminal, lines are read one by one with no editing.

use std::io::{BufRead as _, Write as _};
use std::os::fd::AsFd as _;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use nix::sys::termios::{self, Termios};
use rustyline::error::ReadlineError;
use rustyline::{
    Cmd, ConditionalEventHandler, Event, EventContext, EventHandler, KeyEvent, Movement,
    RepeatCount,
};
use tokio::sync::mpsc;

use super::history::History;

/// What came from the keyboard.
#[derive(Debug)]
pub enum Typed {
    /// A line or a pasted block, without its final newline.
    Line(String),
    /// Ctrl-C at an empty prompt.
    Interrupted,
    /// Ctrl-D at an empty prompt, or the end of standard input.
    Eof,
}

/// What turns the terminal's bracketed paste off (xterm's private mode 2004).
const BRACKETED_PASTE_OFF: &[u8] = b"\x1b[?2004l";

/// How often the thread looks for a prompt request while it waits for typed lines.
const POLL: Duration = Duration::from_millis(50);

/// The keyboard: ask for the prompt with [`Keyboard::prompt`], read what was typed from
/// [`Keyboard::typed`].
pub struct Keyboard {
    requests: Option<std_mpsc::Sender<String>>,
    /// A prompt is on screen (or asked for) and has not answered yet.
    prompting: bool,
    /// The terminal's settings before the editor first ran: a Ctrl-C that arrives as a
    /// signal can end the client in the middle of a read, with the terminal raw.
    saved: Option<Termios>,
    pub typed: mpsc::UnboundedReceiver<Typed>,
}

impl Keyboard {
    /// Reads from standard input; with `interactive` through the line editor, whose history
    /// is kept in the file `history` (none: this run's only).
    pub fn start(interactive: bool, history: Option<std::path::PathBuf>) -> Self {
        let (tx, typed) = mpsc::unbounded_channel();
        if !interactive {
            std::thread::spawn(move || plain_lines(&tx));
            return Self {
                requests: None,
                prompting: false,
                saved: None,
                typed,
            };
        }
        let saved = termios::tcgetattr(std::io::stdin()).ok();
        let (requests, rx) = std_mpsc::channel();
        let history = history.map(History::at);
        std::thread::spawn(move || edit_loop(&rx, &tx, history.as_ref()));
        Self {
            requests: Some(requests),
            prompting: false,
            saved,
            typed,
        }
    }

    /// Puts the terminal back as it was before the editor ran, if a read was cut short.
    pub fn restore_terminal(&self) {
        let Some(saved) = &self.saved else {
            return;
        };
        let stdin = std::io::stdin();
        if termios::tcgetattr(&stdin).is_ok_and(|now| now == *saved) {
            return;
        }
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, saved);
        // The editor turns bracketed paste on for each read and off at its end.
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(BRACKETED_PASTE_OFF);
        let _ = stdout.flush();
    }

    /// Whether the line editor shows the prompt itself.
    pub fn edits(&self) -> bool {
        self.requests.is_some()
    }

    /// Shows the prompt and edits one line; a second request before the answer is ignored.
    pub fn prompt(&mut self, prompt: &str) {
        if self.prompting {
            return;
        }
        if let Some(requests) = &self.requests {
            self.prompting = requests.send(prompt.to_owned()).is_ok();
        }
    }

    /// Call with each [`Typed`] received: the prompt that asked for it has answered.
    pub fn answered(&mut self) {
        self.prompting = false;
    }
}

/// Standard input that is not a terminal: one line at a time.
fn plain_lines(tx: &mpsc::UnboundedSender<Typed>) {
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => {
                let _ = tx.send(Typed::Eof);
                return;
            }
            Ok(_) => {
                let text = line.trim_end_matches(['\r', '\n']).to_owned();
                if tx.send(Typed::Line(text)).is_err() {
                    return;
                }
            }
        }
    }
}

/// The editor thread: lines typed during a reply until a prompt is asked for, then one
/// edited line, and again.
fn edit_loop(
    requests: &std_mpsc::Receiver<String>,
    tx: &mpsc::UnboundedSender<Typed>,
    history: Option<&History>,
) {
    let config = rustyline::Config::builder()
        .auto_add_history(true)
        .bracketed_paste(true)
        .max_history_size(super::history::MAX_ENTRIES)
        .map(rustyline::config::Builder::build);
    let Ok(config) = config else {
        return plain_lines(tx);
    };
    let mut editor = match rustyline::DefaultEditor::with_config(config) {
        Ok(editor) => editor,
        Err(_) => return plain_lines(tx),
    };
    editor.bind_sequence(
        KeyEvent::ctrl('C'),
        EventHandler::Conditional(Box::new(ClearFirst)),
    );
    for entry in history.map(History::load).unwrap_or_default() {
        let _ = editor.add_history_entry(entry);
    }
    loop {
        let prompt = match requests.recv_timeout(POLL) {
            Ok(prompt) => prompt,
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                match cooked_line() {
                    Ok(Some(line)) => {
                        if tx.send(Typed::Line(line)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(()) => {
                        let _ = tx.send(Typed::Eof);
                        return;
                    }
                }
                continue;
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let typed = match editor.readline(&prompt) {
            Ok(line) => {
                if let Some(history) = history
                    && let Err(error) = history.append(&line)
                {
                    tracing::debug!(%error, "the input history could not be saved");
                }
                Typed::Line(line)
            }
            Err(ReadlineError::Interrupted) => Typed::Interrupted,
            Err(_) => Typed::Eof,
        };
        let eof = matches!(typed, Typed::Eof);
        if tx.send(typed).is_err() || eof {
            return;
        }
    }
}

/// Ctrl-C on a line with text clears it; on an empty line it interrupts (the editor's own
/// Ctrl-C, which ends the read).
struct ClearFirst;

impl ConditionalEventHandler for ClearFirst {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, context: &EventContext) -> Option<Cmd> {
        if context.line().is_empty() {
            None
        } else {
            Some(Cmd::Kill(Movement::WholeBuffer))
        }
    }
}

/// A line typed while a reply runs, when one is complete. The terminal is in canonical
/// mode then, so standard input is readable only once Enter was pressed, and one `read`
/// returns at most that line: nothing is read ahead that the editor would miss. `Err` at
/// the end of input.
fn cooked_line() -> Result<Option<String>, ()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => {}
        _ => return Ok(None),
    }
    let mut buffer = [0u8; 4096];
    match nix::unistd::read(fd, &mut buffer) {
        Ok(0) => Err(()),
        Ok(n) => {
            let text = String::from_utf8_lossy(&buffer[..n]);
            Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned()))
        }
        Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => Ok(None),
        Err(_) => Err(()),
    }
}
