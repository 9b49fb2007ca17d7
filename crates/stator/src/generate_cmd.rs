//! `stator generate completions|man`: shell completions and man pages made from the clap
//! definitions themselves, so they cannot drift from the binary. Hidden: `make install` and
//! the Debian package (scripts/install.sh) call it; users get the files.
//!
//! Man pages: `stator.1` and one per visible subcommand, nested ones joined with `-`
//! (`stator-run.1`, `stator-xdp-attach.1`), each naming the commit it was built from.
//! Hidden subcommands (`lab serve`, this one) get none.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::Shell;

/// What to generate.
#[derive(Debug, clap::Subcommand)]
pub enum GenerateCmd {
    /// Shell completions for bash, zsh or fish, on stdout or into a directory.
    Completions(CompletionArgs),
    /// Man pages (roff) of `stator` and every subcommand, into a directory.
    Man(ManArgs),
}

/// Options of `stator generate completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(long, value_enum)]
    shell: Shell,
    /// Write the file (named as the shell expects: stator.bash, _stator, stator.fish) into
    /// this directory instead of printing it.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Options of `stator generate man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The directory to write the pages into (created if needed).
    #[arg(long)]
    out: PathBuf,
}

/// Runs a `stator generate` subcommand.
pub fn run(cmd: GenerateCmd) -> Result<()> {
    let mut cli = crate::Cli::command();
    cli.build();
    match cmd {
        GenerateCmd::Completions(args) => match args.out {
            None => {
                clap_complete::generate(args.shell, &mut cli, "stator", &mut std::io::stdout());
                Ok(())
            }
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let path = clap_complete::generate_to(args.shell, &mut cli, "stator", &dir)
                    .with_context(|| format!("writing completions into {}", dir.display()))?;
                println!("{}", path.display());
                Ok(())
            }
        },
        GenerateCmd::Man(args) => {
            std::fs::create_dir_all(&args.out)
                .with_context(|| format!("creating {}", args.out.display()))?;
            let mut written = 0;
            man_pages(&cli, "stator", &args.out, &mut written)?;
            println!("{written} man pages in {}", args.out.display());
            Ok(())
        }
    }
}

/// Writes the page of `cmd` (named `name`) and of its visible subcommands.
fn man_pages(cmd: &Command, name: &str, dir: &Path, written: &mut usize) -> Result<()> {
    let page = cmd.clone().name(name.to_owned());
    let man = clap_mangen::Man::new(page)
        .title(name.to_ascii_uppercase())
        .section("1")
        .source(format!("stator {}", env!("STATOR_VERSION_LINE")))
        .manual("Stator manual");
    let mut roff = Vec::new();
    man.render(&mut roff)
        .with_context(|| format!("rendering the man page of {name}"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, roff).with_context(|| format!("writing {}", path.display()))?;
    *written += 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        man_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
