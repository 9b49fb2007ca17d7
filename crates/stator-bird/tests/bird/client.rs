//! The control-socket client against a scripted fake BIRD on a Unix socket: replies as BIRD
//! 2.0.12 sends them, a BIRD that hangs, one that restarts, one that speaks garbage.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stator_bird::{BirdClient, BirdError, ProtocolState, Reconfigure, Toggle};

/// What the fake does with a command.
enum Act {
    /// Send these bytes.
    Reply(String),
    /// Close the connection without answering.
    Close,
    /// Never answer.
    Hang,
}

/// A fake BIRD: greets every connection, then answers each command with `script`.
struct FakeBird {
    path: PathBuf,
    connections: Arc<AtomicUsize>,
}

impl FakeBird {
    fn start(name: &str, script: impl Fn(&str, usize) -> Act + Send + Sync + 'static) -> Self {
        let dir = stator_testkit::scratch::unique_path("stator-bird-fake", "");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.ctl"));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        let script = Arc::new(script);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let script = Arc::clone(&script);
                std::thread::spawn(move || serve(stream, n, &*script));
            }
        });
        Self { path, connections }
    }

    fn client(&self, timeout: Duration) -> BirdClient {
        BirdClient::new(&self.path, timeout)
    }
}

impl Drop for FakeBird {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir(dir); // only once empty: other tests share it
        }
    }
}

fn serve(mut stream: UnixStream, connection: usize, script: &dyn Fn(&str, usize) -> Act) {
    if stream.write_all(b"0001 BIRD 2.0.12 ready.\n").is_err() {
        return;
    }
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        match script(line.trim_end(), connection) {
            Act::Reply(text) => {
                if stream.write_all(text.as_bytes()).is_err() {
                    return;
                }
            }
            Act::Close => return,
            Act::Hang => std::thread::sleep(Duration::from_secs(3600)),
        }
    }
}

fn bird_2_0_12(command: &str) -> Act {
    Act::Reply(
        match command {
            "configure" => "0002-Reading configuration from /etc/bird/bird.conf\n0003 Reconfigured\n",
            "configure check" => "0002-Reading configuration from /etc/bird/bird.conf\n0020 Configuration OK\n",
            "enable p1 \"on\"" => "0011-p1: enabled\n0000 \n",
            "enable p2 \"on\"" => "0010-p2: already enabled\n0000 \n",
            "disable p1 \"off\"" => "0009-p1: disabled\n0000 \n",
            "disable p2 \"off\"" => "0008-p2: already disabled\n0000 \n",
            "show protocols" => {
                "2002-Name       Proto      Table      State  Since         Info\n\
                 1002-device1    Device     ---        up     06:37:08.871  \n \
                 tor1       BGP        ---        up     06:37:09.102  Established   \n \
                 stator_vip4_192_0_2_10 Static     stator_v4  down   06:37:08.871  \n\
                 0000 \n"
            }
            _ => "9001 syntax error, unexpected CF_SYM_UNDEFINED, expecting CF_SYM_KNOWN or TEXT or ALL\n",
        }
        .to_owned(),
    )
}

#[test]
fn commands_and_their_replies() {
    let bird = FakeBird::start("replies", |c, _| bird_2_0_12(c));
    let mut c = bird.client(Duration::from_secs(2));
    assert!(!c.is_connected());
    assert_eq!(c.connect().unwrap(), 1);
    assert_eq!(c.version(), Some("2.0.12"));
    assert_eq!(c.configure().unwrap(), Reconfigure::Done);
    c.configure_check().unwrap();
    assert_eq!(c.enable("p1", "on").unwrap(), Toggle::Changed);
    assert_eq!(c.enable("p2", "on").unwrap(), Toggle::Unchanged);
    assert_eq!(c.disable("p1", "off").unwrap(), Toggle::Changed);
    assert_eq!(c.disable("p2", "off").unwrap(), Toggle::Unchanged);
    let protocols = c.show_protocols(false).unwrap();
    assert_eq!(protocols.len(), 3);
    assert_eq!(protocols[1].info, "Established");
    assert_eq!(protocols[2].state, ProtocolState::Down);
    match c.disable("nope", "off") {
        Err(BirdError::Command {
            code: 9001,
            message,
            ..
        }) => {
            assert!(message.starts_with("syntax error"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(c.is_connected(), "an error reply keeps the connection");
    assert_eq!(bird.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn configuration_errors_carry_birds_message() {
    let bird = FakeBird::start("config-error", |c, _| match c {
        "configure check" | "configure" => Act::Reply(
            "0002-Reading configuration from /etc/bird/bird.conf\n\
             8002 /etc/bird/stator.conf, line 12: syntax error, unexpected '}'\n"
                .into(),
        ),
        _ => Act::Reply("0000 \n".into()),
    });
    let mut c = bird.client(Duration::from_secs(2));
    let e = c.configure().unwrap_err();
    assert!(e.is_config_rejected(), "{e:?}");
    assert_eq!(
        e.to_string(),
        "BIRD refused `configure`: 8002 /etc/bird/stator.conf, line 12: syntax error, unexpected '}'"
    );
}

#[test]
fn unexpected_success_codes_are_errors() {
    let bird = FakeBird::start("shutting-down", |_, _| {
        Act::Reply(
            "0002-Reading configuration from x\n0006 Reconfiguration ignored, shutting down\n"
                .into(),
        )
    });
    let mut c = bird.client(Duration::from_secs(2));
    match c.configure() {
        Err(BirdError::Command { code: 6, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bird_that_hangs_times_out_and_the_connection_is_dropped() {
    let bird = FakeBird::start("hang", |c, _| match c {
        "show protocols" => Act::Hang,
        other => bird_2_0_12(other),
    });
    let mut c = bird.client(Duration::from_millis(300));
    let start = Instant::now();
    let e = c.show_protocols(false).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, BirdError::Timeout { .. }), "{e:?}");
    assert!(e.is_connection_lost());
    // A read timeout never fires early; how late it fired is a measurement.
    assert!(took >= Duration::from_millis(300), "{took:?}");
    println!("a hanging BIRD: timed out after {took:?} (timeout 300 ms)");
    assert!(!c.is_connected());
    // The next command opens a new connection.
    assert_eq!(c.configure().unwrap(), Reconfigure::Done);
    assert_eq!(c.connections(), 2);
}

#[test]
fn a_restarted_bird_is_reconnected_transparently() {
    // The first connection closes on its second command, as when BIRD restarts between
    // two commands; the client resends on a new connection.
    let bird = FakeBird::start("restart", |c, connection| {
        if connection == 1 && c == "configure check" {
            Act::Close
        } else {
            bird_2_0_12(c)
        }
    });
    let mut c = bird.client(Duration::from_secs(2));
    assert_eq!(c.configure().unwrap(), Reconfigure::Done);
    c.configure_check().unwrap();
    assert_eq!(c.connections(), 2);
    assert_eq!(bird.connections.load(Ordering::SeqCst), 2);
}

#[test]
fn garbage_and_refused_connections_are_errors() {
    let bird = FakeBird::start("garbage", |_, _| {
        Act::Reply("HTTP/1.1 400 Bad Request\n".into())
    });
    let mut c = bird.client(Duration::from_secs(2));
    match c.configure() {
        Err(BirdError::Protocol { line, .. }) => assert_eq!(line, "HTTP/1.1 400 Bad Request\n"),
        other => panic!("{other:?}"),
    }
    let mut nobody = BirdClient::new("/nonexistent/bird.ctl", Duration::from_secs(1));
    let e = nobody.configure().unwrap_err();
    assert!(matches!(e, BirdError::Connect { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("cannot connect to BIRD's control socket /nonexistent/bird.ctl"),
        "{e}"
    );
    for bad in ["", "show\nprotocols"] {
        assert!(matches!(
            nobody.command(bad),
            Err(BirdError::InvalidCommand { .. })
        ));
    }
    assert!(matches!(
        nobody.enable("x; shutdown", "m"),
        Err(BirdError::InvalidCommand { .. })
    ));
}
