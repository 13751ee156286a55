//! The shape of a chat's message tree, as pure functions over its `(id, parent)` links.
//!
//! Every message names the one before it (`parent`; the first message of a chat, and the
//! first of a branch that edits it, have none). An edit adds a sibling of the edited
//! message, a regenerate a sibling of the reply; nothing is removed. The *current branch*
//! is the path from a first message to the chat's leaf. A child is always created after
//! its parent, so ids grow along every path, and the message with the highest id below a
//! message is a leaf: the newest one there.
//!
//! | question | answer |
//! | --- | --- |
//! | path to `m` | `m`'s ancestors from the first message, then `m` |
//! | newest leaf under `m` | the highest id among `m` and its descendants |
//! | branch through `m` | the path to the newest leaf under `m` |
//! | siblings of `m` | the listed messages with `m`'s parent (or none), in id order |
//! | where a regenerate starts | the nearest user message at or above `m` on its path |
//! | what a switch writes | nothing when the newest leaf under `m` is already the leaf |

use std::collections::{BTreeMap, HashSet};

use keel_core::Role;

use crate::types::{MessageId, MessageKind};

/// One message of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: MessageId,
    pub parent: Option<MessageId>,
    pub role: Role,
    pub kind: MessageKind,
}

/// A chat's messages as a tree.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    nodes: BTreeMap<MessageId, Node>,
}

impl Tree {
    pub fn new(nodes: impl IntoIterator<Item = Node>) -> Self {
        Self {
            nodes: nodes.into_iter().map(|n| (n.id, n)).collect(),
        }
    }

    pub fn get(&self, id: MessageId) -> Option<&Node> {
        self.nodes.get(&id)
    }

    /// The path from the first message to `id` (empty when `id` is not in the tree). A
    /// parent that is not in the tree ends the walk: rows are never removed, so that only
    /// happens to a corrupt link, which must not loop.
    pub fn path_to(&self, id: MessageId) -> Vec<MessageId> {
        let mut path = Vec::new();
        let mut at = self.nodes.get(&id);
        while let Some(node) = at {
            path.push(node.id);
            at = node
                .parent
                .filter(|parent| *parent < node.id)
                .and_then(|parent| self.nodes.get(&parent));
        }
        path.reverse();
        path
    }

    /// The newest message at or below `id`: the highest id among it and its descendants.
    pub fn newest_leaf_under(&self, id: MessageId) -> MessageId {
        let mut below = HashSet::from([id]);
        let mut newest = id;
        // In id order a parent is always seen before its children.
        for node in self.nodes.range(id + 1..).map(|(_, n)| n) {
            if node.parent.is_some_and(|p| below.contains(&p)) {
                below.insert(node.id);
                newest = node.id;
            }
        }
        newest
    }

    /// The branch that runs through `id`, to its newest leaf.
    pub fn branch_through(&self, id: MessageId) -> Vec<MessageId> {
        self.path_to(self.newest_leaf_under(id))
    }

    /// Where a regenerate of `id` (a reply or the user message before it) starts: the
    /// nearest user message at or above it, whose new reply becomes a sibling of the old.
    pub fn regenerate_from(&self, id: MessageId) -> Option<MessageId> {
        self.path_to(id)
            .into_iter()
            .rev()
            .find(|m| self.nodes.get(m).is_some_and(|n| n.role == Role::User))
    }
}

/// Whether the links of a tree brought from elsewhere (an imported chat, in the order it
/// lists them) make a tree Keel could have written, with `leaf` the end of its current
/// branch: ids above zero and growing, every parent an earlier message, the leaf one of
/// them. The leaf may have children: a regenerate makes the user message it answers again
/// the leaf until the new reply commits, and a run that fails first leaves it so. The error
/// names the first link that breaks the tree.
pub fn check_links(
    links: &[(MessageId, Option<MessageId>)],
    leaf: MessageId,
) -> Result<(), String> {
    if links.is_empty() {
        return Err("a chat needs at least one message".into());
    }
    let mut seen = HashSet::new();
    let mut last = 0;
    for (i, (id, parent)) in links.iter().enumerate() {
        if *id <= last {
            return Err(format!(
                "messages[{i}]: id {id} must be above the id before it ({last}): ids are \
                 positive and listed in growing order"
            ));
        }
        if let Some(parent) = parent
            && !seen.contains(parent)
        {
            return Err(format!(
                "messages[{i}]: parent_id {parent} names no message listed before it"
            ));
        }
        seen.insert(*id);
        last = *id;
    }
    if !seen.contains(&leaf) {
        return Err(format!("current_leaf {leaf} names no listed message"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: MessageId, parent: Option<MessageId>, role: Role) -> Node {
        Node {
            id,
            parent,
            role,
            kind: MessageKind::Normal,
        }
    }

    /// 1 user ─ 2 reply ─ 3 user ─ 4 reply (tool call) ─ 5 tool ─ 6 reply
    ///                  └ 7 user (3 edited) ─ 8 reply
    ///        └ 9 reply (2 regenerated)
    fn tree() -> Tree {
        Tree::new([
            node(1, None, Role::User),
            node(2, Some(1), Role::Assistant),
            node(3, Some(2), Role::User),
            node(4, Some(3), Role::Assistant),
            node(5, Some(4), Role::Tool),
            node(6, Some(5), Role::Assistant),
            node(7, Some(2), Role::User),
            node(8, Some(7), Role::Assistant),
            node(9, Some(1), Role::Assistant),
        ])
    }

    #[test]
    fn a_path_runs_from_the_first_message() {
        let t = tree();
        assert_eq!(t.path_to(6), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(t.path_to(8), vec![1, 2, 7, 8]);
        assert_eq!(t.path_to(1), vec![1]);
        assert!(t.path_to(42).is_empty());
    }

    #[test]
    fn a_branch_runs_to_the_newest_leaf_below() {
        let t = tree();
        assert_eq!(t.newest_leaf_under(2), 8);
        assert_eq!(t.newest_leaf_under(3), 6);
        assert_eq!(t.newest_leaf_under(1), 9);
        assert_eq!(t.newest_leaf_under(6), 6);
        assert_eq!(t.branch_through(3), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(t.branch_through(2), vec![1, 2, 7, 8]);
        assert_eq!(t.branch_through(9), vec![1, 9]);
    }

    #[test]
    fn a_regenerate_starts_at_the_user_message_of_the_turn() {
        let t = tree();
        assert_eq!(t.regenerate_from(6), Some(3));
        assert_eq!(t.regenerate_from(4), Some(3));
        assert_eq!(t.regenerate_from(3), Some(3));
        assert_eq!(t.regenerate_from(9), Some(1));
        assert_eq!(t.regenerate_from(42), None);
    }

    #[test]
    fn imported_links_must_make_a_tree_with_its_leaf_in_it() {
        let links = [(1, None), (2, Some(1)), (4, Some(2)), (5, Some(1))];
        assert_eq!(check_links(&links, 4), Ok(()));
        assert_eq!(check_links(&links, 5), Ok(()));
        assert_eq!(check_links(&links, 1), Ok(()), "a regenerate in progress");
        let fails = |links: &[(MessageId, Option<MessageId>)], leaf, says: &str| {
            let error = check_links(links, leaf).unwrap_err();
            assert!(error.contains(says), "{error}");
        };
        fails(&[], 1, "at least one message");
        fails(&links, 3, "names no listed message");
        fails(&[(0, None)], 0, "messages[0]: id 0");
        fails(&[(2, None), (1, None)], 1, "messages[1]: id 1");
        fails(&[(1, None), (1, None)], 1, "messages[1]: id 1");
        fails(&[(1, Some(2)), (2, None)], 2, "messages[0]: parent_id 2");
        fails(&[(1, None), (2, Some(2))], 2, "messages[1]: parent_id 2");
    }

    #[test]
    fn a_link_that_does_not_point_back_ends_the_walk() {
        let t = Tree::new([node(1, Some(2), Role::User), node(2, Some(1), Role::User)]);
        assert_eq!(t.path_to(2), vec![1, 2]);
        assert_eq!(t.path_to(1), vec![1]);
    }
}
