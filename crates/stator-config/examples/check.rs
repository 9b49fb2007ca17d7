//! `cargo run -p stator-config --example check -- FILE [--json]`: what `stator check` prints,
//! before the binary wires it in.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(file) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: check FILE [--json]");
        std::process::exit(2);
    };
    let report = stator_config::check_file(std::path::Path::new(file));
    if args.iter().any(|a| a == "--json") {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => eprintln!("{e}"),
        }
    } else {
        print!("{report}");
    }
    std::process::exit(report.exit_code());
}
