//! The BIRD configurations in `examples/` are valid for BIRD, and fit `examples/stator.toml`:
//! the node's include names Stator's default file, and the node configuration with the file
//! Stator renders from the example passes `bird -p`.

use std::path::{Path, PathBuf};
use std::process::Command;

use stator_bird::{DesiredRoutes, render};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

fn bird_parses(config: &Path) {
    let out = Command::new("bird")
        .arg("-p")
        .arg("-c")
        .arg(config)
        .output()
        .expect("BIRD 2 is not installed (Debian: apt-get install bird2, or `make test-deps`)");
    assert!(
        out.status.success(),
        "bird -p rejected {}: {}",
        config.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_router_example_parses() {
    bird_parses(&example("bird-router.conf"));
}

#[test]
fn the_node_example_includes_what_stator_writes_from_the_example_config() {
    let config = stator_config::load_file(&example("stator.toml")).unwrap();
    let bgp = config.bgp.as_ref().unwrap();
    let node = std::fs::read_to_string(example("bird-node.conf")).unwrap();
    let file = bgp.bird_config.display().to_string();
    let pattern = format!("{}[f]", file.strip_suffix('f').unwrap());
    assert!(
        node.contains(&format!("include \"{pattern}\";")),
        "bird-node.conf includes {file} (as the pattern {pattern})"
    );
    assert!(node.contains(&format!("router id {};", bgp.router_id)));

    let dir = stator_testkit::scratch::unique_path("stator-bird-examples", "");
    std::fs::create_dir_all(&dir).unwrap();
    let rendered = dir.join("stator.conf");
    let routes = DesiredRoutes::from_config(&config, |vip| vip.name != "dns");
    assert_eq!(routes.len(), 3);
    std::fs::write(&rendered, render(bgp, &routes)).unwrap();
    let main = dir.join("bird.conf");
    let local_pattern = format!(
        "{}[f]",
        rendered.display().to_string().strip_suffix('f').unwrap()
    );
    std::fs::write(&main, node.replace(&pattern, &local_pattern)).unwrap();
    bird_parses(&main);
    // Without Stator's file (before Stator first ran), BIRD still starts.
    std::fs::remove_file(&rendered).unwrap();
    bird_parses(&main);
    std::fs::remove_dir_all(&dir).unwrap();
}
