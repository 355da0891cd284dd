//! What an agent process gets when it reads and writes files and runs terminals itself
//! (ACP `fs/*`, `terminal/*`): the same confinement as the tools, output limits, kill.

use std::time::{Duration, Instant};

use super::{Fixture, Harness};
use crate::{FileError, TerminalError, TerminalSpec};

fn spec(command: &str, args: &[&str]) -> TerminalSpec {
    TerminalSpec { command: command.into(), args: args.iter().map(|s| (*s).to_owned()).collect(), ..Default::default() }
}

pub async fn text_files_are_read_and_written_inside_the_workspace(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("src/a.txt", "one\ntwo\nthree\n");
    let abs = f.inner("src/a.txt");
    assert_eq!(f.hand.read_text_file(&abs, None, None).await.unwrap(), "one\ntwo\nthree\n");
    assert_eq!(f.hand.read_text_file(&abs, Some(2), Some(1)).await.unwrap(), "two\n");
    f.hand.write_text_file(&f.inner("out/new.txt"), "fresh").await.unwrap();
    assert_eq!(std::fs::read_to_string(f.host("out/new.txt")).unwrap(), "fresh");
    assert_eq!(f.sh("cat out/new.txt").await, "fresh", "processes see what was written");
    assert!(matches!(f.hand.read_text_file(&f.inner("nope"), None, None).await, Err(FileError::NotFound(_))));
    for outside in ["/etc/passwd", "../x", "/tmp/x"] {
        assert!(matches!(f.hand.read_text_file(outside, None, None).await, Err(FileError::Refused(_))), "{outside}");
        assert!(matches!(f.hand.write_text_file(outside, "x").await, Err(FileError::Refused(_))), "{outside}");
    }
    let outside = f.dir.path().parent().unwrap().join(super::unique("outside"));
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, f.host("link")).unwrap();
    assert!(f.hand.write_text_file("link/escaped.txt", "x").await.is_err());
    assert!(!outside.join("escaped.txt").exists(), "a symlink led a write out of the workspace");
    let _ = std::fs::remove_dir_all(outside);
}

pub async fn terminals_run_report_output_and_exit(h: &dyn Harness) {
    let f = Fixture::new(h);
    f.put("sub/marker", "m");
    let t = f.hand.terminals();
    let mut s = spec("sh", &["-c", "pwd; echo $GREETING; echo oops >&2; exit 3"]);
    s.env = vec![("GREETING".into(), "hello".into())];
    s.cwd = Some(f.inner("sub"));
    let id = t.create(s).await.unwrap();
    let exit = t.wait_for_exit(&id).await.unwrap();
    assert_eq!(exit.exit_code, Some(3));
    assert_eq!(exit.signal, None);
    let out = t.output(&id).unwrap();
    assert_eq!(out.output, format!("{}\nhello\noops\n", f.inner("sub")));
    assert!(!out.truncated);
    assert_eq!(out.exit, Some(exit));
    t.release(&id).unwrap();
    assert!(matches!(t.output(&id), Err(TerminalError::NotFound(_))), "released ids are gone");

    let mut outside = spec("true", &[]);
    outside.cwd = Some("/etc".into());
    assert!(matches!(t.create(outside).await, Err(TerminalError::Refused(_))));
    let mut up = spec("true", &[]);
    up.cwd = Some("..".into());
    assert!(matches!(t.create(up).await, Err(TerminalError::Refused(_))));
    let mut bad_env = spec("true", &[]);
    bad_env.env = vec![("A=B".into(), "x".into())];
    assert!(matches!(t.create(bad_env).await, Err(TerminalError::Invalid(_))));
}

pub async fn terminal_output_is_limited_from_the_start(h: &dyn Harness) {
    let f = Fixture::new(h);
    let t = f.hand.terminals();
    // More than a pipe holds: when the command exits, the reader is still behind. The exit
    // must not be reported before the output written before it has been read.
    let mut s = spec("sh", &["-c", "seq 1 30000 | sed 's/^/line/'"]);
    s.output_byte_limit = Some(24);
    let id = t.create(s).await.unwrap();
    t.wait_for_exit(&id).await.unwrap();
    let out = t.output(&id).unwrap();
    assert!(out.truncated);
    assert!(out.output.len() <= 24, "{:?}", out.output);
    assert!(out.output.ends_with("line29999\nline30000\n"), "{:?}", out.output);
    // A child finishing the output just after the command exits is still part of it: the
    // exit waits (a bounded moment) for the pipe to close. (Where the sandbox has its own pid
    // namespace, such a child dies with the command and the pipe closes at once.)
    let id = t.create(spec("sh", &["-c", "(sleep 0.3; echo tail) & echo head"])).await.unwrap();
    assert_eq!(t.wait_for_exit(&id).await.unwrap().exit_code, Some(0));
    let out = t.output(&id).unwrap().output;
    if h.provider().tier() == crate::ProviderKind::Local.tier() {
        assert_eq!(out, "head\ntail\n");
    } else {
        assert!(out == "head\n" || out == "head\ntail\n", "{out:?}");
    }
    // Without truncation too: everything, at the moment the exit is known.
    let id = t.create(spec("sh", &["-c", "head -c 90000 /dev/zero | tr '\\0' a; echo; echo END"])).await.unwrap();
    t.wait_for_exit(&id).await.unwrap();
    let out = t.output(&id).unwrap();
    assert!(!out.truncated && out.output.len() == 90005 && out.output.ends_with("a\nEND\n"), "{}", out.output.len());
}

pub async fn killed_terminals_stop_with_their_children(h: &dyn Harness) {
    let f = Fixture::new(h);
    let t = f.hand.terminals();
    let id = t.create(spec("sh", &["-c", "(sleep 2; echo late > late.txt) & echo started; sleep 30"])).await.unwrap();
    let begun = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(t.output(&id).unwrap().exit, None, "still running");
    t.kill(&id).unwrap();
    let exit = t.wait_for_exit(&id).await.unwrap();
    assert!(begun.elapsed() < Duration::from_secs(10));
    assert!(exit.exit_code.is_some() || exit.signal.is_some(), "{exit:?}");
    assert!(t.output(&id).unwrap().output.starts_with("started"), "the output survives a kill");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!f.host("late.txt").exists(), "a child of a killed terminal survived");

    // Release kills a running command too, and hibernation releases everything; also the
    // background children of commands that have already exited.
    let a = t.create(spec("sh", &["-c", "sleep 2; echo a > a.txt"])).await.unwrap();
    t.release(&a).unwrap();
    let _b = t.create(spec("sh", &["-c", "sleep 2; echo b > b.txt"])).await.unwrap();
    let c = t.create(spec("sh", &["-c", "(sleep 2; echo c > c.txt) >/dev/null 2>&1 & exit 0"])).await.unwrap();
    let _d = t.create(spec("sh", &["-c", "(sleep 2; echo d > d.txt) >/dev/null 2>&1 & exit 0"])).await.unwrap();
    assert_eq!(t.wait_for_exit(&c).await.unwrap().exit_code, Some(0));
    t.release(&c).unwrap();
    f.hand.hibernate().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for name in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        assert!(!f.host(name).exists(), "{name}: a terminal's process outlived its release");
    }
}

/// An operator's variables reach the program and never appear on any command line of the
/// host (credentials of an agent command).
pub async fn operator_variables_stay_out_of_argv(h: &dyn Harness) {
    let f = Fixture::new(h);
    let secret = super::unique("secret");
    let env = vec![("AGENT_TOKEN".to_owned(), secret.clone())];
    let script = "printf '%s\\n' \"$AGENT_TOKEN\"; exec sleep 5";
    let mut cmd = f.sandbox.command_with_env("sh", &["-c".to_owned(), script.to_owned()], &env).unwrap();
    cmd.stdout(std::process::Stdio::piped()).stdin(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(20), tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(line.trim_end(), secret, "the program sees the variable");
    assert!(super::processes_with(&secret).is_empty(), "the value is on a command line");
    let _ = child.kill().await;
}

/// The variables an agent gives a terminal reach its command and appear on no command line of
/// the host (they are often tokens).
pub async fn terminal_variables_stay_out_of_argv(h: &dyn Harness) {
    let f = Fixture::new(h);
    let t = f.hand.terminals();
    let secret = super::unique("token");
    let mut s = spec("sh", &["-c", "printf '%s|%s\\n' \"$GH_TOKEN\" \"$MULTI\"; exec sleep 5"]);
    s.env = vec![("GH_TOKEN".into(), secret.clone()), ("MULTI".into(), "a b\nc".into())];
    let id = t.create(s).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !t.output(&id).unwrap().output.contains('\n') || !t.output(&id).unwrap().output.contains("a b\nc") {
        assert!(Instant::now() < deadline, "no output: {:?}", t.output(&id).unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(t.output(&id).unwrap().output, format!("{secret}|a b\nc\n"), "the command sees the variables");
    assert!(super::processes_with(&secret).is_empty(), "the value is on a command line");
    t.release(&id).unwrap();
    for bad in ["1X", "A-B", "A B", ""] {
        let mut s = spec("true", &[]);
        s.env = vec![(bad.into(), "x".into())];
        assert!(matches!(t.create(s).await, Err(TerminalError::Invalid(_))), "{bad:?}");
    }
}
