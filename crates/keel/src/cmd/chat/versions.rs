//! The prompt's commands on versions of messages (branches): `/history`, `/branches`,
//! `/branch N` and `/regenerate`.

use anyhow::{Context as _, bail};

use super::{Prompt, branches};

impl Prompt {
    fn current_chat(&self) -> anyhow::Result<String> {
        self.chat
            .clone()
            .context("no chat yet: send a message first")
    }

    /// Prints the current branch, one line a message, with the versions marked.
    pub(super) async fn history(&mut self) -> anyhow::Result<()> {
        let chat = self.current_chat()?;
        let messages = self.api.messages(&chat).await?;
        if messages.is_empty() {
            self.notice("no messages yet");
            return Ok(());
        }
        self.notice("the current branch:");
        for message in &messages {
            self.notice(&branches::history_line(message));
        }
        Ok(())
    }

    /// Lists the versions of message `at` (of the last fork of the current branch when
    /// none is named), the current one starred.
    pub(super) async fn list_versions(&mut self, at: Option<i64>) -> anyhow::Result<()> {
        let chat = self.current_chat()?;
        let current = self.api.messages(&chat).await?;
        let message = match at {
            Some(id) => match current.iter().find(|m| m.id == id) {
                Some(message) => message.clone(),
                None => self
                    .api
                    .branch_messages(&chat, id)
                    .await?
                    .into_iter()
                    .find(|m| m.id == id)
                    .with_context(|| format!("no message #{id} in this chat"))?,
            },
            None => match branches::fork(&current) {
                Some(message) => message.clone(),
                None => {
                    self.notice(
                        "no message of this branch has other versions (/edit or /regenerate makes one)",
                    );
                    return Ok(());
                }
            },
        };
        let versions = if message.siblings.is_empty() {
            vec![message.id]
        } else {
            message.siblings.clone()
        };
        self.notice(&format!(
            "versions of #{} (/branch N switches):",
            message.id
        ));
        for (index, &id) in versions.iter().enumerate() {
            let version = match current.iter().find(|m| m.id == id) {
                Some(version) => Some(version.clone()),
                None => self
                    .api
                    .branch_messages(&chat, id)
                    .await?
                    .into_iter()
                    .find(|m| m.id == id),
            };
            let on_branch = current.iter().any(|m| m.id == id);
            if let Some(version) = version {
                let line = branches::version_line(index + 1, &version, on_branch);
                self.notice(&line);
            }
        }
        self.listed = Some(versions);
        Ok(())
    }

    /// Makes the N-th version of the listed message current and prints the chat again.
    pub(super) async fn switch_version(&mut self, n: usize) -> anyhow::Result<()> {
        let chat = self.current_chat()?;
        let versions = match self.listed.clone() {
            Some(versions) => versions,
            None => {
                let current = self.api.messages(&chat).await?;
                branches::fork(&current)
                    .map(|m| m.siblings.clone())
                    .context("no message of this branch has other versions: /branches lists them")?
            }
        };
        let id = branches::pick(&versions, n).map_err(anyhow::Error::msg)?;
        self.api.switch_branch(&chat, id).await?;
        self.notice(&format!("switched to version {n} (#{id})"));
        // Following the chat again from its start brings the branch now current, of which
        // only what differs from the screen is printed, the versions marked, and the
        // prompt at its end.
        self.follow_chat(chat, true);
        Ok(())
    }

    /// Has the model write another version of the last reply; the old one stays a branch.
    pub(super) async fn regenerate(&mut self) -> anyhow::Result<()> {
        let chat = self.current_chat()?;
        if self.transcript.is_busy() {
            bail!("a reply is in progress: Ctrl-C interrupts it first");
        }
        let current = self.api.messages(&chat).await?;
        let target =
            branches::regenerate_target(&current).context("this chat has nothing to regenerate")?;
        self.api.regenerate(&chat, target).await?;
        self.listed = None;
        self.notice("writing another version of the reply; /branches lists them");
        self.transcript.started_run();
        self.was_busy = true;
        Ok(())
    }
}
