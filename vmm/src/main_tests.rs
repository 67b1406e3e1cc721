//! The command line's own checks: clap's consistency, help texts, the
//! subcommand tip.

use super::*;

/// clap's own consistency checks over every subcommand, and no option
/// whose help text names a default that clap prints as well
/// (`[default: 3] [default: 3]`).
#[test]
fn every_option_shows_its_default_once() {
    fn walk(cmd: &clap::Command, path: &str) {
        for arg in cmd.get_arguments() {
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                arg.get_default_values().is_empty() || !help.contains("[default:"),
                "{path} --{}: its help names a default that clap also prints",
                arg.get_id()
            );
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()));
        }
    }
    let cmd = Cli::command();
    cmd.clone().debug_assert();
    walk(&cmd, "vmm");
}

#[test]
fn a_swap_of_neighbours_is_one_edit() {
    assert_eq!(edits("rnu", "run"), 1);
    assert_eq!(edits("bnech", "bench"), 1);
    assert_eq!(edits("features", "features"), 0);
    assert_eq!(edits("xyz", "run"), 3);
}
