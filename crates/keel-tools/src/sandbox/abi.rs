//! Which Landlock ABI the kernel offers, and what the daemon does with `run_command` on it.
//!
//! ABI 3 (Linux 6.2) is the least that confines: before it `truncate(2)` is never checked, so
//! a command could empty any file the daemon's user may write, the database included. Below
//! it `run_command` is refused at start-up unless the operator allowed it to run unconfined.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope,
};

/// The least ABI under which the daemon confines `run_command`.
pub const REQUIRED_ABI: u8 = 3;

/// Set to a number, the ABI [`kernel_abi`] reports instead of probing, so a test can start
/// the daemon as on an older kernel. Read only by debug builds: a release binary always
/// probes the kernel.
pub const SIMULATED_ABI_VAR: &str = "KEEL_TEST_LANDLOCK_ABI";

/// What the daemon does with `run_command` on a kernel of a given ABI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Every command starts confined.
    Confine,
    /// Commands run unconfined, as the operator allowed; the text is logged as a warning.
    Unconfined(String),
    /// Start-up stops with this error.
    Refuse(String),
}

/// The plan for a kernel of Landlock ABI `abi` (0: none) when the operator did or did not
/// set `[tools] run_command_unconfined`.
pub fn plan(abi: u8, unconfined_allowed: bool) -> Plan {
    if abi >= REQUIRED_ABI {
        return Plan::Confine;
    }
    let kernel = match abi {
        0 => "this kernel offers no Landlock".to_owned(),
        n => format!("this kernel offers only Landlock ABI {n}, which cannot deny truncate(2)"),
    };
    if unconfined_allowed {
        Plan::Unconfined(format!(
            "{kernel}: run_command runs commands unconfined, as `[tools] \
             run_command_unconfined = true` allows (they can read, write and truncate whatever \
             the daemon's user can, the database included)"
        ))
    } else {
        Plan::Refuse(format!(
            "{kernel}: run_command needs Landlock ABI {REQUIRED_ABI} or later (Linux 6.2) to \
             confine commands to the workspace; remove `run_command` from `[tools] builtin`, \
             or set `[tools] run_command_unconfined = true` to run commands with the daemon's \
             user's full powers"
        ))
    }
}

/// The Landlock ABI of the running kernel: the highest whose features can all be enforced
/// (0 without Landlock). In debug builds [`SIMULATED_ABI_VAR`] overrides the probe.
pub fn kernel_abi() -> u8 {
    #[cfg(debug_assertions)]
    if let Some(abi) = std::env::var(SIMULATED_ABI_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return abi;
    }
    let mut abi = 0;
    for (level, offered) in [
        (1, hard(|r| r.handle_access(AccessFs::from_all(ABI::V1)))),
        (2, hard(|r| r.handle_access(AccessFs::from_all(ABI::V2)))),
        (3, hard(|r| r.handle_access(AccessFs::from_all(ABI::V3)))),
        (4, hard(|r| r.handle_access(AccessNet::from_all(ABI::V4)))),
        (5, hard(|r| r.handle_access(AccessFs::from_all(ABI::V5)))),
        (6, hard(|r| r.scope(Scope::from_all(ABI::V6)))),
    ] {
        if !offered {
            break;
        }
        abi = level;
    }
    abi
}

/// Whether a ruleset that must enforce what `add` asks for can be created here.
fn hard(add: impl FnOnce(Ruleset) -> Result<Ruleset, landlock::RulesetError>) -> bool {
    // Every probe handles the first file-system rights too: a ruleset handles something.
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(add)
        .and_then(|ruleset| ruleset.create())
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_three_and_later_confine_and_older_kernels_refuse_unless_unconfined_is_allowed() {
        for abi in [3, 4, 6, 7, 9] {
            assert_eq!(plan(abi, false), Plan::Confine, "ABI {abi}");
            assert_eq!(plan(abi, true), Plan::Confine, "ABI {abi}");
        }
        for abi in [0, 1, 2] {
            let Plan::Refuse(error) = plan(abi, false) else {
                panic!("ABI {abi} was not refused");
            };
            assert!(error.contains("run_command_unconfined = true"), "{error}");
            assert!(error.contains("Landlock ABI 3 or later"), "{error}");
            let Plan::Unconfined(warning) = plan(abi, true) else {
                panic!("ABI {abi} was not run unconfined");
            };
            assert!(warning.contains("unconfined"), "{warning}");
        }
        let Plan::Refuse(error) = plan(2, false) else {
            panic!()
        };
        assert!(error.contains("cannot deny truncate(2)"), "{error}");
    }
}
