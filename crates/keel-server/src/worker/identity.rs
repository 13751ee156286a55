//! Who owns a chat: owner tokens that say which process of which machine holds the lease.
//!
//! A worker id is `HOST~NODE~PID~NONCE`, where NODE names this kernel boot and PID
//! namespace. A restarted daemon on the same machine recognises chats held by a process of
//! its own node that no longer exists (killed, crashed) and releases them at once, instead
//! of waiting up to a lease for them to expire. Any doubt (another node, a pid that is alive
//! again, no `/proc`) leaves the chat to lease expiry, which is always safe: fencing stops a
//! run that loses its chat.

use std::path::Path;

/// This process as an owner of chats.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    host: String,
    /// `None` where the machine cannot tell its processes apart (no `/proc`).
    node: Option<String>,
    pid: u32,
}

impl Identity {
    pub(crate) fn current() -> Self {
        Self {
            host: hostname(),
            node: node(),
            pid: std::process::id(),
        }
    }

    /// A fresh worker id for this process.
    pub(crate) fn worker_id(&self) -> String {
        format!(
            "{}~{}~{}~{}",
            self.host,
            self.node.as_deref().unwrap_or("unknown"),
            self.pid,
            uuid::Uuid::new_v4().simple()
        )
    }

    /// The prefix every owner token of this node starts with, if the node is known.
    pub(crate) fn node_prefix(&self) -> Option<String> {
        let node = self.node.as_deref()?;
        Some(format!("{}~{node}~", self.host))
    }

    /// Whether `owner` is a process of this node that no longer runs.
    pub(crate) fn owner_is_dead(&self, owner: &str) -> bool {
        self.owner_is_dead_with(owner, |pid| Path::new(&format!("/proc/{pid}")).exists())
    }

    fn owner_is_dead_with(&self, owner: &str, alive: impl Fn(u32) -> bool) -> bool {
        let Some(rest) = self
            .node_prefix()
            .and_then(|p| owner.strip_prefix(&p).map(str::to_owned))
        else {
            return false;
        };
        let Some(pid) = rest.split('~').next().and_then(|p| p.parse::<u32>().ok()) else {
            return false;
        };
        pid != self.pid && !alive(pid)
    }
}

fn hostname() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    from_kernel
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().replace('~', "-"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "keel".to_owned())
}

/// This kernel boot and PID namespace: pids are only comparable within both.
fn node() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let namespace: String = namespace
        .to_string_lossy()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let boot: String = boot.trim().chars().filter(|c| *c != '-').take(12).collect();
    Some(format!("{boot}.{namespace}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            host: "box".into(),
            node: Some("b00t.4026531836".into()),
            pid: 100,
        }
    }

    #[test]
    fn only_dead_processes_of_this_node_are_recognised() {
        let me = identity();
        let alive = |pid: u32| pid == 200;
        let dead = me.owner_is_dead_with("box~b00t.4026531836~300~abc.def", alive);
        assert!(dead, "a pid of this node that does not run");
        assert!(
            !me.owner_is_dead_with("box~b00t.4026531836~200~abc.def", alive),
            "alive"
        );
        assert!(
            !me.owner_is_dead_with("box~b00t.4026531836~100~abc.def", alive),
            "ourselves"
        );
        assert!(
            !me.owner_is_dead_with("box~other~300~abc.def", alive),
            "another node"
        );
        assert!(
            !me.owner_is_dead_with("keel-abc.def", alive),
            "an old-style token"
        );
        assert!(
            !me.owner_is_dead_with("box~b00t.4026531836~x~abc", alive),
            "garbage"
        );
        let unknown = Identity {
            node: None,
            ..identity()
        };
        assert!(!unknown.owner_is_dead_with("box~b00t.4026531836~300~a", alive));
    }

    #[test]
    fn worker_ids_carry_the_node_prefix() {
        let me = Identity::current();
        if let Some(prefix) = me.node_prefix() {
            assert!(me.worker_id().starts_with(&prefix));
            assert!(!me.owner_is_dead(&me.worker_id()));
        }
    }
}
