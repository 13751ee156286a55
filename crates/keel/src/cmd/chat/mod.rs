//! `keel chat`: a terminal client of a running daemon.
//!
//! The prompt loop reads what is typed (`editor`: a line editor at the prompt), sends it,
//! and prints the chat's live events through the [`transcript::Transcript`] state machine,
//! reply text styled as Markdown (`markdown`) and broken between words at the terminal's
//! width (`wrap`). Ctrl-C once interrupts the run; twice within two seconds, or at an empty
//! idle prompt, exits; on a half-typed line it clears the line.

mod branches;
mod commands;
mod editor;
mod history;
mod markdown;
mod render;
mod table;
mod transcript;
mod usage;
mod versions;
mod wrap;

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use commands::Input;
use editor::{Keyboard, Typed};
use keel_client::{Api, Feed};
use render::Renderer;
use transcript::Transcript;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8700")]
    pub url: String,
    /// Bearer token, needed when the daemon has users configured.
    #[arg(long, env = "KEEL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Continue this chat instead of starting a new one.
    #[arg(long)]
    pub chat: Option<String>,
    /// Model for new chats (the daemon's default when absent).
    #[arg(long)]
    pub model: Option<String>,
    /// Read one question from standard input, print the final reply and exit.
    #[arg(long)]
    pub once: bool,
}

/// How many chats `/chats` lists.
const LISTED_CHATS: usize = 20;
/// How many chats `/switch ID` looks for the id among.
const KNOWN_CHATS: usize = 200;
/// Home, then erase the screen and the scrollback: what `/clear` prints.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J\x1b[3J";

/// A second Ctrl-C within this window exits instead of interrupting again.
const DOUBLE_CTRL_C: Duration = Duration::from_secs(2);
const SPINNER_TICK: Duration = Duration::from_millis(100);

pub async fn run(args: Args) -> anyhow::Result<()> {
    let api = Api::new(&args.url, args.token.clone())?;
    if args.once {
        return once(&api, &args).await;
    }
    Prompt::new(api, args)?.run().await
}

/// Forwards Ctrl-C presses; the handler stays installed so a press never kills the process.
///
/// The handler is registered before this returns, and so before the line editor first
/// reads. The editor never replaces it (its `signal-hook` feature): while it reads, the
/// terminal is raw and Ctrl-C reaches it as a key; at any other moment the press is a
/// SIGINT and comes here, even when the editor starts a read before the signal is handled.
fn ctrl_c_presses() -> std::io::Result<mpsc::UnboundedReceiver<()>> {
    let (tx, rx) = mpsc::unbounded_channel();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut presses = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            while presses.recv().await.is_some() {
                if tx.send(()).is_err() {
                    break;
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// `--once`: one question from standard input, the final reply on standard output.
async fn once(api: &Api, args: &Args) -> anyhow::Result<()> {
    let mut question = String::new();
    std::io::stdin()
        .read_to_string(&mut question)
        .context("cannot read the question from standard input")?;
    let question = question.trim();
    if question.is_empty() {
        bail!("no question on standard input (try: echo \"question\" | keel chat --once)");
    }
    let (chat, after) = match &args.chat {
        Some(chat) => {
            let before = api.messages(chat).await?.iter().map(|m| m.id).max();
            api.send_message(chat, question, "queue").await?;
            (chat.clone(), before.unwrap_or(0))
        }
        None => (
            api.create_chat(question, args.model.as_deref()).await?.id,
            0,
        ),
    };
    let (tx, mut feed) = mpsc::unbounded_channel();
    let follower = keel_client::follow(api.clone(), chat.clone(), tx);
    let mut presses = ctrl_c_presses().context("cannot listen for Ctrl-C")?;
    let mut transcript = Transcript::new();
    let outcome = loop {
        tokio::select! {
            item = feed.recv() => match item {
                Some(Feed::Event(event)) => {
                    transcript.apply(&event);
                    let answered = transcript.last_user_id() > after;
                    if answered && transcript.status().is_some_and(transcript::is_idle) {
                        break Ok(());
                    }
                }
                Some(Feed::Failed(message)) => break Err(anyhow::anyhow!(message)),
                Some(Feed::Lost(_) | Feed::Restored) => {}
                None => break Err(anyhow::anyhow!("the event stream ended")),
            },
            Some(()) = presses.recv() => {
                let _ = api.interrupt(&chat).await;
                follower.abort();
                bail!("interrupted");
            }
        }
    };
    follower.abort();
    outcome?;
    match transcript.status() {
        Some("error") => bail!(
            "the run failed: {}",
            transcript.last_error().unwrap_or("unknown error")
        ),
        Some("requires_action") => {
            bail!("the model called a client-side tool; answer it through the API (chat {chat})")
        }
        _ => {}
    }
    let reply = transcript
        .last_assistant()
        .filter(|m| m.id > transcript.last_user_id())
        .context("the run ended without a reply")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", reply.text())?;
    stdout.flush()?;
    if reply.interrupted {
        bail!("the reply was interrupted");
    }
    Ok(())
}

/// The interactive prompt.
struct Prompt {
    api: Api,
    args: Args,
    chat: Option<String>,
    follower: Option<JoinHandle<()>>,
    feed_tx: mpsc::UnboundedSender<Feed>,
    feed: mpsc::UnboundedReceiver<Feed>,
    transcript: Transcript,
    renderer: Renderer,
    tty: bool,
    /// Ctrl-C presses while no line is being edited (the editor reports its own).
    presses: mpsc::UnboundedReceiver<()>,
    keyboard: Keyboard,
    spinner: Option<usize>,
    last_ctrl_c: Option<Instant>,
    was_busy: bool,
    quit_when_idle: bool,
    /// The versions `/branches` listed last, which `/branch N` counts in.
    listed: Option<Vec<i64>>,
    /// The chats `/chats` listed last, which `/switch N` counts in.
    listed_chats: Option<Vec<keel_client::ChatSummary>>,
}

enum Step {
    Continue,
    Exit,
}

impl Prompt {
    fn new(api: Api, args: Args) -> anyhow::Result<Self> {
        let tty = std::io::stdout().is_terminal();
        let (feed_tx, feed) = mpsc::unbounded_channel();
        // Registered before the line editor starts: see `ctrl_c_presses`.
        let presses = ctrl_c_presses().context("cannot listen for Ctrl-C")?;
        Ok(Self {
            api,
            args,
            chat: None,
            follower: None,
            feed_tx,
            feed,
            transcript: Transcript::new(),
            renderer: Renderer::for_stdout(tty),
            tty,
            presses,
            keyboard: Keyboard::start(std::io::stdin().is_terminal(), history::default_path()),
            spinner: None,
            last_ctrl_c: None,
            was_busy: false,
            quit_when_idle: false,
            listed: None,
            listed_chats: None,
        })
    }

    fn write(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut stdout = std::io::stdout().lock();
        if self.spinner.take().is_some() {
            let _ = stdout.write_all(self.renderer.clear_spinner().as_bytes());
        }
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }

    fn notice(&mut self, text: &str) {
        let line = self.renderer.notice(text);
        self.write(&line);
    }

    fn error(&mut self, text: &str) {
        let line = self.renderer.error(text);
        self.write(&line);
    }

    /// Ends any streamed text and asks the line editor for the prompt (only when standard
    /// input is a terminal: piped lines get none).
    fn prompt(&mut self) {
        if self.keyboard.edits() {
            let text = self.renderer.finish();
            self.write(&text);
            self.keyboard.prompt("> ");
        }
    }

    async fn run(mut self) -> anyhow::Result<()> {
        if let Some(chat) = self.args.chat.clone() {
            self.api.chat(&chat).await?;
            self.switch(chat);
        } else {
            // Fail early and clearly when the daemon is not there.
            self.api.chats(1).await?;
        }
        self.notice(commands::GREETING);
        let mut ticker = tokio::time::interval(SPINNER_TICK);
        let mut stdin_open = true;
        if self.chat.is_none() {
            self.prompt();
        }
        loop {
            let step = tokio::select! {
                typed = self.keyboard.typed.recv(), if stdin_open => {
                    self.keyboard.answered();
                    self.renderer.at_line_start();
                    match typed {
                        Some(Typed::Line(line)) => self.input(&line).await,
                        Some(Typed::Interrupted) => self.ctrl_c().await,
                        Some(Typed::Eof) | None => {
                            stdin_open = false;
                            self.quit_when_idle = true;
                            Step::Continue
                        }
                    }
                }
                Some(item) = self.feed.recv() => self.feed_item(item).await,
                Some(()) = self.presses.recv() => self.ctrl_c().await,
                _ = ticker.tick() => {
                    self.tick();
                    Step::Continue
                }
            };
            if matches!(step, Step::Exit) || (self.quit_when_idle && !self.transcript.is_busy()) {
                break;
            }
        }
        let end = self.renderer.finish();
        self.write(&end);
        if let Some(follower) = self.follower.take() {
            follower.abort();
        }
        self.keyboard.restore_terminal();
        Ok(())
    }

    fn tick(&mut self) {
        if !self.tty || !self.transcript.awaiting_reply() {
            return;
        }
        let frame = self.spinner.map_or(0, |f| f + 1);
        let text = self.renderer.spinner(frame);
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
        self.spinner = Some(frame);
    }

    async fn feed_item(&mut self, item: Feed) -> Step {
        match item {
            Feed::Event(event) => {
                let pieces = self.transcript.apply(&event);
                let text: String = pieces.iter().map(|p| self.renderer.render(p)).collect();
                self.write(&text);
                // While a followed chat's history replays its status is not known yet: the
                // replay has not ended, and the prompt waits for the status that ends it.
                if self.transcript.status().is_some() {
                    let busy = self.transcript.is_busy();
                    if self.was_busy && !busy {
                        self.show_usage().await;
                        self.prompt();
                    }
                    self.was_busy = busy;
                }
            }
            Feed::Lost(reason) => {
                self.notice(&format!("connection lost ({reason}); reconnecting…"))
            }
            Feed::Restored => self.notice("reconnected"),
            Feed::Failed(message) => self.error(&format!("cannot follow the chat: {message}")),
        }
        Step::Continue
    }

    /// The chat's tokens and cost so far, after a run ends; nothing when they cannot be read.
    async fn show_usage(&mut self) {
        let Some(chat) = self.chat.clone() else {
            return;
        };
        if let Ok(summary) = self.api.chat(&chat).await
            && let Some(line) = summary.usage.as_ref().and_then(usage::line)
        {
            self.notice(&line);
        }
    }

    async fn ctrl_c(&mut self) -> Step {
        let now = Instant::now();
        let repeated = self
            .last_ctrl_c
            .replace(now)
            .is_some_and(|at| now.duration_since(at) < DOUBLE_CTRL_C);
        let Some(chat) = self.chat.clone() else {
            return Step::Exit;
        };
        if repeated || !self.transcript.is_busy() {
            return Step::Exit;
        }
        match self.api.interrupt(&chat).await {
            Ok(()) => self.notice("interrupting… (Ctrl-C again to exit)"),
            Err(error) => self.error(&format!("{error:#}")),
        }
        Step::Continue
    }

    /// Follows `chat` from the start of its history, which is printed as it replays.
    fn switch(&mut self, chat: String) {
        self.follow_chat(chat, false);
    }

    /// Follows `chat` from the start of its history; with `continuing` (the same chat, after
    /// a change of branch) only what differs from the screen is printed.
    fn follow_chat(&mut self, chat: String, continuing: bool) {
        if let Some(follower) = self.follower.take() {
            follower.abort();
        }
        // Events of the previous chat still in the channel must not reach the new transcript.
        let (feed_tx, feed) = mpsc::unbounded_channel();
        self.feed_tx = feed_tx;
        self.feed = feed;
        self.transcript = if continuing {
            Transcript::continuing(&self.transcript)
        } else {
            Transcript::new()
        };
        self.listed = None;
        // The replayed history ends with the chat's status; an idle one brings the prompt.
        self.was_busy = true;
        let end = self.renderer.finish();
        self.write(&end);
        if !continuing {
            self.notice(&format!("chat {chat}"));
        }
        self.follower = Some(keel_client::follow(
            self.api.clone(),
            chat.clone(),
            self.feed_tx.clone(),
        ));
        self.chat = Some(chat);
    }

    async fn input(&mut self, line: &str) -> Step {
        let result = match commands::parse(line) {
            Input::Empty => {
                if !self.transcript.is_busy() {
                    self.prompt();
                }
                Ok(())
            }
            Input::Quit => return Step::Exit,
            Input::Help => {
                for line in commands::help() {
                    self.notice(&line);
                }
                Ok(())
            }
            Input::Clear => {
                let end = self.renderer.finish();
                self.write(&end);
                self.write(CLEAR_SCREEN);
                self.renderer.at_line_start();
                Ok(())
            }
            Input::Invalid(message) => {
                self.error(&message);
                Ok(())
            }
            Input::New => {
                if let Some(follower) = self.follower.take() {
                    follower.abort();
                }
                self.chat = None;
                self.transcript = Transcript::new();
                self.was_busy = false;
                self.notice("the next message starts a new chat");
                self.prompt();
                Ok(())
            }
            Input::Chats => self.list_chats().await,
            Input::Switch(which) => self.switch_to(&which).await,
            Input::Message(text) => self.send(&text).await,
            Input::Queue(text) => self.queue(&text).await,
            Input::Edit(text) => self.edit(&text).await,
            Input::Continue => self.rerun(Rerun::Continue).await,
            Input::Retry => self.rerun(Rerun::Retry).await,
            Input::History => self.history().await,
            Input::Branches(at) => self.list_versions(at).await,
            Input::Branch(n) => self.switch_version(n).await,
            Input::Regenerate => self.regenerate().await,
        };
        if let Err(error) = result {
            self.error(&format!("{error:#}"));
        }
        // Back to the prompt unless a reply (or a chat's history) is on its way: its end
        // brings the prompt.
        if !self.transcript.is_busy() && !self.was_busy {
            self.prompt();
        }
        Step::Continue
    }

    /// Numbered, the newest first, in local time; `/switch N` counts in this list.
    async fn list_chats(&mut self) -> anyhow::Result<()> {
        let chats = self.api.chats(LISTED_CHATS).await?;
        if chats.is_empty() {
            self.notice("no chats yet");
        }
        let now = chrono::Local::now();
        for (index, chat) in chats.iter().enumerate() {
            let line = commands::chat_line(index + 1, chat, self.chat.as_deref(), &now);
            self.notice(&line);
        }
        if !chats.is_empty() {
            self.notice("/switch N or /switch ID (its first characters) continues one");
        }
        self.listed_chats = Some(chats);
        Ok(())
    }

    /// `/switch N` (a number of `/chats`) or `/switch ID` (the start of a chat's id).
    async fn switch_to(&mut self, which: &str) -> anyhow::Result<()> {
        let known = self.api.chats(KNOWN_CHATS).await?;
        let listed = self
            .listed_chats
            .clone()
            .unwrap_or_else(|| known.iter().take(LISTED_CHATS).cloned().collect());
        let id = match commands::resolve_switch(which, &listed, &known) {
            Ok(id) => id,
            // A whole id of a chat older than those looked through.
            Err(message) => match self.api.chat(which).await {
                Ok(chat) => chat.id,
                Err(_) => return Err(anyhow!(message)),
            },
        };
        self.switch(id);
        Ok(())
    }

    async fn send(&mut self, text: &str) -> anyhow::Result<()> {
        let Some(chat) = self.chat.clone() else {
            let chat = self
                .api
                .create_chat(text, self.args.model.as_deref())
                .await?;
            self.switch(chat.id);
            self.transcript.expect_user(text);
            self.transcript.started_run();
            self.was_busy = true;
            return Ok(());
        };
        if self.transcript.is_busy() {
            self.notice("a reply is in progress: /queue TEXT sends after it, Ctrl-C interrupts it");
            return Ok(());
        }
        self.transcript.expect_user(text);
        let sent = self.api.send_message(&chat, text, "queue").await?;
        if sent.message_id.is_some() {
            self.transcript.started_run();
            self.was_busy = true;
        }
        Ok(())
    }

    async fn queue(&mut self, text: &str) -> anyhow::Result<()> {
        let Some(chat) = self.chat.clone() else {
            return self.send(text).await;
        };
        self.transcript.expect_user(text);
        let sent = self.api.send_message(&chat, text, "queue").await?;
        if sent.queue_id.is_some() {
            self.notice("queued: it is sent when the current reply ends");
        } else {
            self.transcript.started_run();
            self.was_busy = true;
        }
        Ok(())
    }

    async fn edit(&mut self, text: &str) -> anyhow::Result<()> {
        let Some(chat) = self.chat.clone() else {
            bail!("no chat yet: send a message first");
        };
        let messages = self.api.messages(&chat).await?;
        let last_user = messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .context("this chat has no user message to edit")?;
        self.api.edit_message(&chat, last_user.id, text).await?;
        self.notice(&format!("edited message {}; replying again", last_user.id));
        self.transcript.started_run();
        self.was_busy = true;
        Ok(())
    }

    /// `/continue` and `/retry`: the chat runs again with no new message.
    async fn rerun(&mut self, what: Rerun) -> anyhow::Result<()> {
        let Some(chat) = self.chat.clone() else {
            bail!("no chat yet: send a message first");
        };
        match what {
            Rerun::Continue => self.api.continue_reply(&chat).await?,
            Rerun::Retry => self.api.retry(&chat).await?,
        }
        self.transcript.started_run();
        self.was_busy = true;
        Ok(())
    }
}

/// What `/continue` and `/retry` ask for.
#[derive(Debug, Clone, Copy)]
enum Rerun {
    /// Carry on the reply the user stopped.
    Continue,
    /// Run the failed turn again.
    Retry,
}
