//! The command line's tests: parsing, the config file as flags, and clap's own checks.

use super::*;
use clap::CommandFactory;
use std::path::Path;

fn args(list: &[&str]) -> Vec<std::ffi::OsString> {
    std::iter::once("capsule")
        .chain(list.iter().copied())
        .map(Into::into)
        .collect()
}

fn capture(list: &[&str]) -> Result<CaptureArgs, String> {
    match parse_args(args(list)) {
        Ok(Cli {
            cmd: Cmd::Capture(a),
        }) => Ok(a),
        Ok(other) => panic!("not capture: {other:?}"),
        Err(ArgsError::Config(m)) => Err(m),
        Err(ArgsError::Clap(e)) => Err(e.to_string()),
    }
}

fn file(dir: &tempfile::TempDir, text: &str) -> String {
    let f = dir.path().join("capsule.toml");
    std::fs::write(&f, text).unwrap();
    f.display().to_string()
}

fn serve(list: &[&str]) -> Result<ServeArgs, String> {
    match parse_args(args(list)) {
        Ok(Cli { cmd: Cmd::Serve(a) }) => Ok(a),
        Ok(other) => panic!("not serve: {other:?}"),
        Err(ArgsError::Config(m)) => Err(m),
        Err(ArgsError::Clap(e)) => Err(e.to_string()),
    }
}

/// Every long flag of `sub` (but --help and --config) has a key in `keys`, named like
/// the flag with `_` for `-`, and every key a flag.
fn flags_match_keys(sub: &str, keys: &[(&str, &str, capsule_config::CaptureType)]) {
    let cmd = Cli::command();
    let sub = cmd.find_subcommand(sub).unwrap();
    let mut flags: Vec<String> = sub
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .filter(|f| f != "--help" && f != "--config")
        .collect();
    let mut keys: Vec<String> = keys
        .iter()
        .map(|(k, f, _)| {
            assert_eq!(f.trim_start_matches("--").replace('-', "_"), *k);
            f.to_string()
        })
        .collect();
    flags.sort();
    keys.sort();
    assert_eq!(flags, keys);
}

#[test]
fn every_serve_flag_has_a_config_key_and_every_key_a_flag() {
    flags_match_keys("serve", capsule_config::SERVE_KEYS);
}

#[test]
fn the_serve_section_fills_in_flags_and_the_command_line_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[groups]\na = []\n[serve]\nstore = \"/srv/capsule\"\nlisten = \"127.0.0.1:8443\"\n\
         cert = \"srv.pem\"\nkey = \"srv.key\"\ntokens = \"tokens\"\n\
         client_ca = \"ca.pem\"\ncrl = [\"a.crl\", \"b.crl\"]\nmax_queries = 3\n\
         max_bytes_per_query = \"1G\"\nmax_query_time = \"5m\"\n",
    );
    let a = serve(&["serve", "--config", &f]).unwrap();
    assert_eq!(a.store, PathBuf::from("/srv/capsule"));
    assert_eq!(a.listen, "127.0.0.1:8443");
    assert_eq!(a.crl, vec![PathBuf::from("a.crl"), PathBuf::from("b.crl")]);
    assert_eq!(a.max_queries, 3);
    assert_eq!(a.max_queries_per_user, 2);
    assert_eq!(a.max_bytes_per_query, 1 << 30);
    assert_eq!(a.max_query_time, Duration::from_secs(300));
    assert_eq!(a.config.as_deref(), Some(Path::new(&f)));
    let a = serve(&[
        "serve",
        "--config",
        &f,
        "--listen",
        "[::1]:9",
        "--max-queries=7",
    ])
    .unwrap();
    assert_eq!(a.listen, "[::1]:9");
    assert_eq!(a.max_queries, 7);
    // A value its flag refuses names the file, line and key.
    let bad = file(
        &dir,
        "[serve]\nlisten = \"x:1\"\nmax_query_time = \"soon\"\n",
    );
    let e = serve(&["serve", "--config", &bad]).unwrap_err();
    assert!(
        e.contains(":3:") && e.contains("serve.max_query_time") && e.contains("--max-query-time"),
        "{e}"
    );
    // What neither gives is named with its key.
    let part = file(&dir, "[serve]\nlisten = \"x:1\"\n");
    let e = serve(&["serve", "--config", &part]).unwrap_err();
    assert!(
        e.contains("--store is needed") && e.contains("[serve]"),
        "{e}"
    );
    let unknown = file(&dir, "[serve]\nlisten = \"x:1\"\nport = 3\n");
    let e = serve(&["serve", "--config", &unknown]).unwrap_err();
    assert!(e.contains(":3:") && e.contains("serve.port"), "{e}");
}

#[test]
fn every_capture_flag_has_a_config_key_and_every_key_a_flag() {
    flags_match_keys("capture", capsule_config::CAPTURE_KEYS);
}

#[test]
fn the_age_tier_is_age_colon_level_from_the_flag_or_the_file() {
    use capsule_store::compact::AgeTier;
    let t = |age: u64, level: i32| AgeTier {
        age: Duration::from_secs(age),
        level: capsule_store::writer::Level::Zstd(level),
    };
    let a = capture(&[
        "capture",
        "--iface",
        "x",
        "--store",
        "s",
        "--age-tier",
        "7d:9",
    ])
    .unwrap();
    assert_eq!(a.age_tier, Some(t(7 * 86400, 9)));
    let a = capture(&["capture", "--iface", "x", "--store", "s"]).unwrap();
    assert_eq!(a.age_tier, None, "the tier is off unless asked for");
    for (bad, says) in [
        ("7d", "no `:`"),
        ("7d:store", "zstd level"),
        ("7d:99", "level"),
        ("0s:9", "age of 0"),
        ("soon:9", "soon"),
    ] {
        let e =
            capture(&["capture", "--iface", "x", "--store", "s", "--age-tier", bad]).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[capture]\niface = \"eth9\"\nstore = \"/srv/capsule\"\nage_tier = \"12h:6\"\n",
    );
    let a = capture(&["capture", "--config", &f]).unwrap();
    assert_eq!(a.age_tier, Some(t(12 * 3600, 6)));
    let a = capture(&["capture", "--config", &f, "--age-tier", "1d:15"]).unwrap();
    assert_eq!(a.age_tier, Some(t(86400, 15)));
    let bad = file(&dir, "[capture]\niface = \"eth9\"\nage_tier = \"12h\"\n");
    let e = capture(&["capture", "--config", &bad, "--store", "s"]).unwrap_err();
    assert!(e.contains(":3:") && e.contains("age_tier"), "{e}");
}

#[test]
fn the_file_fills_in_flags_and_the_command_line_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[groups]\na = []\n[capture]\niface = \"eth9\"\nstore = \"/srv/capsule\"\n\
         ring_size = \"64M\"\nsnaplen = 96\nqueues = [0, 2]\nlevel = -10\n\
         take_interface = true\nmode = \"afpacket\"\nmax_bytes = \"2G\"\n",
    );
    let a = capture(&["capture", "--config", &f]).unwrap();
    assert_eq!(a.iface, ["eth9"]);
    assert_eq!(a.store, PathBuf::from("/srv/capsule"));
    assert_eq!(a.ring_size, 64 << 20);
    assert_eq!(a.snaplen, 96);
    assert_eq!(
        format!("{:?}", a.queues),
        format!(
            "{:?}",
            "0,2".parse::<capsule_capture::live::Queues>().unwrap()
        )
    );
    assert_eq!(
        format!("{:?}", a.writer.level),
        format!(
            "{:?}",
            "-10".parse::<capsule_store::writer::Level>().unwrap()
        )
    );
    assert!(a.take_interface);
    assert!(matches!(a.mode, CaptureMode::Afpacket));
    assert_eq!(a.writer.max_bytes, Some(Setting::Set(2 << 30)));
    // Defaults stay for keys the file lacks.
    assert_eq!(a.frame_size, 2048);

    let a = capture(&[
        "capture",
        "--ring-size",
        "32M",
        "--config",
        &f,
        "--iface=lo",
        "--snaplen",
        "0",
        "--mode",
        "auto",
    ])
    .unwrap();
    assert_eq!(a.iface, ["lo"]);
    assert_eq!(a.ring_size, 32 << 20);
    assert_eq!(a.snaplen, 0);
    assert!(matches!(a.mode, CaptureMode::Auto));
    assert_eq!(a.store, PathBuf::from("/srv/capsule"));
    assert_eq!(a.writer.max_bytes, Some(Setting::Set(2 << 30)));
}

#[test]
fn several_interfaces_come_from_the_command_line_or_the_file_with_their_modes() {
    let a = capture(&[
        "capture",
        "--iface",
        "a",
        "--iface",
        "b",
        "--store",
        "s",
        "--iface-mode",
        "b=afpacket",
    ])
    .unwrap();
    assert_eq!(a.iface, ["a", "b"]);
    assert_eq!(a.iface_mode, [("b".to_string(), CaptureMode::Afpacket)]);
    let e = capture(&[
        "capture",
        "--iface",
        "a",
        "--store",
        "s",
        "--iface-mode",
        "a",
    ])
    .unwrap_err();
    assert!(e.contains("IFACE=MODE"), "{e}");
    let e = capture(&[
        "capture",
        "--iface",
        "a",
        "--store",
        "s",
        "--iface-mode",
        "a=turbo",
    ])
    .unwrap_err();
    assert!(
        e.contains("\"turbo\" is not a mode") && e.contains("afpacket"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[capture]\niface = [\"eth1\", \"eth2\"]\nstore = \"s\"\n\
         [capture.interfaces.eth2]\nmode = \"afpacket\"\n",
    );
    let a = capture(&["capture", "--config", &f]).unwrap();
    assert_eq!(a.iface, ["eth1", "eth2"]);
    assert_eq!(a.iface_mode, [("eth2".to_string(), CaptureMode::Afpacket)]);
    // The command line's interfaces replace the file's.
    let a = capture(&["capture", "--config", &f, "--iface", "x"]).unwrap();
    assert_eq!(a.iface, ["x"]);
    let f = file(&dir, "[capture.interfaces.eth2]\nmode = \"fast\"\n");
    let e = capture(&["capture", "--config", &f, "--iface", "x", "--store", "s"]).unwrap_err();
    assert!(
        e.contains(":2:8: capture.interfaces.eth2.mode: bad value for --iface-mode"),
        "{e}"
    );
}

#[test]
fn a_switch_set_false_in_the_file_stays_off() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[capture]\niface = \"eth9\"\nstore = \"s\"\ntake_interface = false\n",
    );
    assert!(
        !capture(&["capture", "--config", &f])
            .unwrap()
            .take_interface
    );
    assert!(
        capture(&["capture", "--config", &f, "--take-interface"])
            .unwrap()
            .take_interface
    );
}

#[test]
fn a_bad_value_in_the_file_names_its_line_and_flag() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[capture]\niface = \"eth9\"\n\nblock_age = \"soon\"\n",
    );
    let e = capture(&["capture", "--config", &f, "--store", "s"]).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "{f}:4:13: capture.block_age: bad value for --block-age: "
        )),
        "{e}"
    );
    assert!(e.contains("soon"), "{e}");
    // The same value on the command line overrides the bad one: the file's is not used.
    capture(&[
        "capture",
        "--config",
        &f,
        "--store",
        "s",
        "--block-age",
        "1s",
    ])
    .unwrap();
    let f = file(&dir, "[capture]\nmode = \"xdp-turbo\"\n");
    let e = capture(&["capture", "--config", &f, "--store", "s", "--iface", "x"]).unwrap_err();
    assert!(
        e.contains(":2:8: capture.mode: bad value for --mode: "),
        "{e}"
    );
}

#[test]
fn iface_and_store_are_needed_from_one_place_or_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(&dir, "[capture]\nstore = \"s\"\n");
    let e = capture(&["capture", "--config", &f]).unwrap_err();
    assert!(e.contains("--iface is needed"), "{e}");
    assert_eq!(
        capture(&["capture", "--config", &f, "--iface", "x"])
            .unwrap()
            .iface,
        ["x"]
    );
    let e = capture(&["capture", "--iface", "x"]).unwrap_err();
    assert!(e.contains("--store"), "{e}");
}

#[test]
fn an_invalid_file_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(
        &dir,
        "[capture]\niface = \"x\"\nstore = \"s\"\nringsize = \"1G\"\n",
    );
    let e = capture(&["capture", "--config", &f]).unwrap_err();
    assert!(
        e.starts_with(&format!("{f}:4:1: capture.ringsize: unknown key")),
        "{e}"
    );
}

mod help_audit {
    use clap::CommandFactory;

    /// Every subcommand (at any depth) and every one of its arguments, flags and positionals
    /// alike, has a description in `--help`.
    /// clap checks its definitions (no two arguments of a command with one long name, valid
    /// `requires`, ...) only in debug builds: run those checks here, since the tests run in
    /// release. A flattened `--key` once hid `top --key` behind `query --server`'s TLS key.
    #[test]
    fn the_command_line_definitions_pass_clap_s_own_checks() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_and_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>, args: &mut usize) {
            let here = format!("{path} {}", cmd.get_name()).trim().to_string();
            if cmd.get_about().is_none() && cmd.get_long_about().is_none() && !path.is_empty() {
                missing.push(format!("`{here}` has no description"));
            }
            for a in cmd.get_arguments() {
                if matches!(a.get_id().as_str(), "help" | "version") {
                    continue;
                }
                *args += 1;
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("`{here}` argument {} has no help", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() != "help" {
                    walk(sub, &here, missing, args);
                }
            }
        }
        let cmd = super::Cli::command();
        let (mut missing, mut args) = (Vec::new(), 0);
        walk(&cmd, "", &mut missing, &mut args);
        assert!(args > 50, "the walk saw only {args} arguments");
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
