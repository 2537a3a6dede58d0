//! Tests of the whole parse: each rule and each error kind, with the line it names.

use std::net::IpAddr;

use super::*;

/// The example of docs/config.md.
const EXAMPLE: &str = r#"# capsule config
[groups]
voice = ["10.4.0.0/24", "fd00:4::/64"]
gpu = ["10.1.1.0/24"]
model-store = ["10.7.0.10"]
backup = ["10.8.0.20"]
lab = ["10.0.0.0/8"]

[dscp]
ef = ["voice"]
cs1 = []

[egress]
model-store = ["backup", "192.0.2.0/24"]

[work_hours]
days = "mon-fri"
start = "08:00"
end = "19:00"
timezone = "Europe/Berlin"
"#;

fn ok(text: &str) -> Config {
    Config::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn err(text: &str) -> Invalid {
    match Config::parse(text, "t.toml") {
        Ok(_) => panic!("parsed:\n{text}"),
        Err(e) => e.invalid().cloned().expect("an Invalid"),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Checks kind, line, key, and that the message holds each of `words`.
fn check(e: &Invalid, kind: ErrorKind, line: usize, key: &str, words: &[&str]) {
    let msg = e.to_string();
    assert_eq!(e.kind, kind, "{msg}");
    assert_eq!(e.line, line, "{msg}");
    assert_eq!(e.key, key, "{msg}");
    assert!(msg.starts_with(&format!("t.toml:{line}:")), "{msg}");
    for w in words {
        assert!(msg.contains(w), "{msg:?} lacks {w:?}");
    }
}

/// Unix nanoseconds of a UTC civil time.
fn utc(s: &str) -> u64 {
    let ts: jiff::Timestamp = s.parse().unwrap();
    u64::try_from(ts.as_nanosecond()).unwrap()
}

#[test]
fn the_example_parses_into_the_model() {
    let c = ok(EXAMPLE);
    let g = c.groups();
    let names: Vec<&str> = g.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["voice", "gpu", "model-store", "backup", "lab"]);
    let voice = g.by_name("voice").unwrap();
    assert_eq!(g.name(voice), "voice");
    assert_eq!(g.get(voice).unwrap().prefixes.len(), 2);
    assert_eq!(c.dscp_rules().len(), 2);
    assert_eq!(c.dscp_rules()[0].name, "ef");
    assert_eq!(c.egress_rules().len(), 1);
    assert_eq!(
        c.work_hours().unwrap().describe(),
        "mon-fri 08:00-19:00 Europe/Berlin"
    );
}

#[test]
fn an_empty_file_is_a_valid_config_with_nothing_in_it() {
    let c = ok("# nothing\n");
    assert!(c.groups().is_empty());
    assert!(c.dscp_allowed(46, None));
    assert!(c.egress_allowed(None, ip("1.2.3.4"), &[]));
    assert!(c.work_hours().is_none());
}

#[test]
fn the_most_specific_prefix_wins_in_both_families() {
    let c = ok(EXAMPLE);
    let g = c.groups();
    let of = |a: &str| g.group_of(ip(a)).map(|id| g.name(id).to_string());
    assert_eq!(of("10.1.1.5").as_deref(), Some("gpu"));
    assert_eq!(of("10.1.2.5").as_deref(), Some("lab"));
    assert_eq!(of("10.7.0.10").as_deref(), Some("model-store"));
    assert_eq!(of("10.7.0.11").as_deref(), Some("lab"));
    assert_eq!(of("fd00:4::99").as_deref(), Some("voice"));
    assert_eq!(of("fd00:5::99"), None);
    assert_eq!(of("11.0.0.1"), None);
    // IPv4-mapped IPv6 is looked up as IPv4.
    assert_eq!(of("::ffff:10.4.0.9").as_deref(), Some("voice"));
}

#[test]
fn group_lookup_is_fast() {
    // 4096 prefixes of 16 lengths: a lookup probes one map per length, not each prefix.
    let mut text = String::from("[groups]\n");
    for i in 0..256u32 {
        let prefixes: Vec<String> = (0..16u32)
            .map(|l| format!("\"{}.{i}.0.0/{}\"", 10 + l, 16 + l))
            .collect();
        text.push_str(&format!("g{i} = [{}]\n", prefixes.join(", ")));
    }
    let c = ok(&text);
    let g = c.groups();
    let n = 2_000_000u32;
    let t = std::time::Instant::now();
    let mut hits = 0u32;
    for i in 0..n {
        let a =
            IpAddr::from((((10 + i % 16) << 24) | ((i % 256) << 16) | (i & 0xffff)).to_be_bytes());
        hits += u32::from(g.group_of(a).is_some());
    }
    let per = t.elapsed().as_nanos() as f64 / f64::from(n);
    assert!(hits > 0);
    eprintln!("group_of: {per:.1} ns a lookup, 4096 prefixes of 16 lengths");
    // Generous: a loaded 2-core machine; a linear scan over 4096 prefixes costs ~10 µs.
    assert!(per < 1000.0, "{per:.0} ns a lookup");
}

#[test]
fn dscp_policy_limits_listed_values_to_their_groups() {
    let c = ok(EXAMPLE);
    let g = c.groups();
    let voice = g.by_name("voice");
    let gpu = g.by_name("gpu");
    assert!(c.dscp_allowed(46, voice));
    assert!(!c.dscp_allowed(46, gpu));
    assert!(!c.dscp_allowed(46, None));
    // cs5 (40) is not ef: unlisted, so free.
    assert!(c.dscp_allowed(40, gpu));
    // An empty list: nobody.
    assert!(!c.dscp_allowed(8, voice));
    assert!(c.dscp_allowed(0, None));
    assert!(c.dscp_allowed(63, gpu));
    assert!(c.dscp_allowed(200, gpu));
}

#[test]
fn dscp_keys_take_names_numbers_and_aliases() {
    let c = ok("[groups]\na = []\n[dscp]\n46 = [\"a\"]\nAF41 = [\"a\"]\nbe = [\"a\"]\n");
    let values: Vec<u8> = c.dscp_rules().iter().map(|r| r.value).collect();
    assert_eq!(values, [46, 34, 0]);
    let names: Vec<&str> = c.dscp_rules().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["ef", "af41", "df"]);
}

#[test]
fn egress_allows_listed_targets_and_the_own_group_only() {
    let c = ok(EXAMPLE);
    let g = c.groups();
    let ms = g.by_name("model-store");
    assert!(c.egress_allowed(ms, ip("10.8.0.20"), &[]), "a listed group");
    assert!(
        c.egress_allowed(ms, ip("192.0.2.77"), &[]),
        "a listed prefix"
    );
    assert!(c.egress_allowed(ms, ip("10.7.0.10"), &[]), "its own group");
    assert!(!c.egress_allowed(ms, ip("10.1.1.5"), &[]), "another group");
    assert!(
        !c.egress_allowed(ms, ip("203.0.113.5"), &[]),
        "an address in no group"
    );
    assert!(
        !c.egress_allowed(ms, ip("10.7.0.11"), &[]),
        "lab: the /8, not model-store's /32"
    );
    // No entry: anywhere.
    assert!(c.egress_allowed(g.by_name("gpu"), ip("203.0.113.5"), &[]));
    assert!(c.egress_allowed(None, ip("10.7.0.10"), &[]));
}

#[test]
fn work_hours_follow_berlin_across_both_daylight_saving_changes() {
    let c = ok("[work_hours]\ndays = \"mon-sun\"\nstart = \"08:00\"\nend = \"19:00\"\ntimezone = \"Europe/Berlin\"\n");
    let w = c.work_hours().unwrap();
    // Saturday 2026-03-28, CET (UTC+1): 08:00 local is 07:00 UTC.
    assert!(!w.contains(utc("2026-03-28T06:30:00Z")));
    assert!(w.contains(utc("2026-03-28T07:00:00Z")));
    assert!(w.contains(utc("2026-03-28T17:59:59Z")));
    assert!(!w.contains(utc("2026-03-28T18:00:00Z")));
    // Sunday 2026-03-29, clocks forward at 01:00 UTC, CEST (UTC+2): 08:00 is 06:00 UTC.
    assert!(w.contains(utc("2026-03-29T06:30:00Z")));
    assert!(!w.contains(utc("2026-03-29T05:59:59Z")));
    assert!(!w.contains(utc("2026-03-29T17:00:00Z")));
    assert!(w.contains(utc("2026-03-29T16:59:59Z")));
    // Saturday 2026-10-24 still CEST; Sunday 2026-10-25 back to CET at 01:00 UTC.
    assert!(w.contains(utc("2026-10-24T06:30:00Z")));
    assert!(!w.contains(utc("2026-10-25T06:30:00Z")));
    assert!(w.contains(utc("2026-10-25T07:00:00Z")));
    assert!(w.contains(utc("2026-10-25T17:30:00Z")));
}

#[test]
fn work_hours_skip_days_not_listed() {
    let c = ok("[work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\ntimezone = \"UTC\"\n");
    let w = c.work_hours().unwrap();
    // 2026-12-04 is a Friday, 2026-12-05 a Saturday.
    assert!(w.contains(utc("2026-12-04T12:00:00Z")));
    assert!(!w.contains(utc("2026-12-05T12:00:00Z")));
    assert!(!w.contains(utc("2026-12-06T12:00:00Z")));
    assert!(w.contains(utc("2026-12-07T08:00:00Z")));
    assert!(!w.contains(utc("2026-12-07T07:59:59Z")));
    assert!(!w.contains(utc("2026-12-07T19:00:00Z")));
}

#[test]
fn an_overnight_range_ends_the_day_after_a_listed_day() {
    let c = ok("[work_hours]\ndays = \"fri\"\nstart = \"22:00\"\nend = \"06:00\"\ntimezone = \"America/New_York\"\n");
    let w = c.work_hours().unwrap();
    assert!(w.overnight());
    assert_eq!(
        w.describe(),
        "fri 22:00-06:00 (overnight, ends the next day) America/New_York"
    );
    // Friday 2026-12-04 22:30 EST = 03:30 UTC Saturday.
    assert!(w.contains(utc("2026-12-05T03:30:00Z")));
    // Saturday 05:59 EST = 10:59 UTC.
    assert!(w.contains(utc("2026-12-05T10:59:00Z")));
    assert!(!w.contains(utc("2026-12-05T11:00:00Z")));
    // Saturday 22:30 EST: Saturday is not listed.
    assert!(!w.contains(utc("2026-12-06T03:30:00Z")));
    // Friday 05:00 EST: the range of Thursday, not listed.
    assert!(!w.contains(utc("2026-12-04T10:00:00Z")));
}

#[test]
fn days_are_shown_in_canonical_form() {
    let d = |days: &str| {
        let c = ok(&format!(
            "[work_hours]\ndays = \"{days}\"\nstart = \"00:00\"\nend = \"24:00\"\ntimezone = \"UTC\"\n"
        ));
        c.work_hours().unwrap().days_text()
    };
    assert_eq!(d("mon,tue,wed,thu,fri"), "mon-fri");
    assert_eq!(d("mon,wed,fri"), "mon,wed,fri");
    assert_eq!(d("sat-sun"), "sat,sun");
    assert_eq!(d("mon-fri,sun"), "mon-fri,sun");
    assert_eq!(d("sun-sat"), "mon-sun");
}

// ---- errors, each with its line -------------------------------------------------------

#[test]
fn syntax_errors_name_the_line() {
    let e = err("[groups]\na = [\"10.0.0.0/8\"\n\nb = 1\n");
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert!(e.line >= 2, "{e}");
    let e = err("[groups]\na = []\n[groups]\n");
    check(&e, ErrorKind::Syntax, 3, "", &["duplicate"]);
}

#[test]
fn deep_nesting_is_a_syntax_error_not_a_stack_overflow() {
    let text = format!(
        "[groups]\na = {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = err(&text);
    check(&e, ErrorKind::Syntax, 2, "", &["recurse"]);
    let text = format!("groups = {}1{}\n", "{a=".repeat(50_000), "}".repeat(50_000));
    check(&err(&text), ErrorKind::Syntax, 1, "", &["recurse"]);
}

#[test]
fn unknown_top_level_keys_list_the_sections() {
    let e = err("[groups]\na = []\n\n[captur]\niface = \"eth0\"\n");
    check(
        &e,
        ErrorKind::UnknownKey,
        4,
        "captur",
        &["groups, dscp, egress, work_hours, capture", "`captur`"],
    );
}

#[test]
fn unknown_keys_in_work_hours_name_the_full_path() {
    let e = err("[work_hours]\ndays = \"mon\"\nstart = \"08:00\"\nend = \"09:00\"\ntimezone = \"UTC\"\nzone = \"x\"\n");
    check(
        &e,
        ErrorKind::UnknownKey,
        6,
        "work_hours.zone",
        &["days, start, end, timezone"],
    );
}

#[test]
fn wrong_types_name_the_key_and_what_was_found() {
    let e = err("groups = 3\n");
    check(
        &e,
        ErrorKind::WrongType,
        1,
        "groups",
        &["a table", "an integer 3"],
    );
    let e = err("[groups]\ngpu = \"10.1.1.0/24\"\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "groups.gpu",
        &["an array", "a string"],
    );
    let e = err("[groups]\ngpu = [\"10.1.1.0/24\",\n  \"10.1.2.0/24\",\n  7]\n");
    check(
        &e,
        ErrorKind::WrongType,
        4,
        "groups.gpu[2]",
        &["an integer 7"],
    );
    let e = err("groups = [\n  \"10.0.0.0/8\",\n]\n");
    check(
        &e,
        ErrorKind::WrongType,
        1,
        "groups",
        &["found an array [ \"10.0.0.0/8\", ]"],
    );
    assert!(!e.to_string().contains('\n'));
    // The other three keys given: a missing one would be reported too, at the header.
    let e = err(
        "[work_hours]\ndays = [\"mon\"]\nstart = \"08:00\"\nend = \"19:00\"\ntimezone = \"UTC\"\n",
    );
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "work_hours.days",
        &["an array"],
    );
}

#[test]
fn a_bad_cidr_is_named() {
    let e = err("[groups]\nvoice = [\"10.4.0.0/24\"]\ngpu = [\"10.1.1.0/24\",\n    \"10.1.2.0/24\", \"10.1.3.0/33\"]\n");
    check(
        &e,
        ErrorKind::BadPrefix,
        4,
        "groups.gpu[2]",
        &["\"10.1.3.0/33\"", "0 to 32"],
    );
    let e = err("[groups]\nx = [\"10.1.1/24\"]\n");
    check(
        &e,
        ErrorKind::BadPrefix,
        2,
        "groups.x[0]",
        &["not an IPv4 or IPv6 address"],
    );
}

#[test]
fn host_bits_say_which_prefix_was_meant() {
    let e = err("[groups]\ngpu = [\"10.1.1.5/24\"]\n");
    check(
        &e,
        ErrorKind::HostBits,
        2,
        "groups.gpu[0]",
        &["did you mean 10.1.1.0/24?"],
    );
    let e = err("[groups]\nv6 = [\"fd00:4::1/64\"]\n");
    check(&e, ErrorKind::HostBits, 2, "groups.v6[0]", &["fd00:4::/64"]);
}

#[test]
fn the_same_prefix_in_two_groups_names_both() {
    let e = err(
        "[groups]\nmodel-store = [\"10.7.0.10\"]\n\nbackup = [\"10.8.0.20\", \"10.7.0.10/32\"]\n",
    );
    check(
        &e,
        ErrorKind::DuplicatePrefix,
        4,
        "groups.backup[1]",
        &["also in group `model-store` (line 2)"],
    );
    let e = err("[groups]\na = [\"fd00::/64\", \"fd00::/64\"]\n");
    check(
        &e,
        ErrorKind::DuplicatePrefix,
        2,
        "groups.a[1]",
        &["earlier in the same group"],
    );
    // IPv4-mapped IPv6 is the same prefix as its IPv4.
    let e = err("[groups]\na = [\"10.0.0.0/8\"]\nb = [\"::ffff:10.0.0.0/104\"]\n");
    check(&e, ErrorKind::DuplicatePrefix, 3, "groups.b[0]", &["`a`"]);
}

#[test]
fn empty_and_reserved_group_names_are_refused() {
    let e = err("[groups]\na = []\n\"\" = [\"10.0.0.0/8\"]\n");
    check(&e, ErrorKind::BadName, 3, "groups.\"\"", &["empty"]);
    let e = err("[groups]\nunassigned = [\"10.0.0.0/8\"]\n");
    check(
        &e,
        ErrorKind::BadName,
        2,
        "groups.unassigned",
        &["reserved"],
    );
    let e = err("[groups]\n\"10.0.0.0\" = []\n");
    check(
        &e,
        ErrorKind::BadName,
        2,
        "groups.\"10.0.0.0\"",
        &["a letter"],
    );
}

#[test]
fn an_undefined_group_in_dscp_or_egress_is_named_with_its_line() {
    let e = err("[groups]\nvoice = []\n[dscp]\nef = [\"voice\",\n  \"vioce\"]\n");
    check(
        &e,
        ErrorKind::UnknownGroup,
        5,
        "dscp.ef[1]",
        &["`vioce`", "(voice)"],
    );
    let e = err("[groups]\nvoice = []\n[egress]\nmodelstore = [\"voice\"]\n");
    check(
        &e,
        ErrorKind::UnknownGroup,
        4,
        "egress.modelstore",
        &["`modelstore`"],
    );
    let e = err("[groups]\nvoice = []\n[egress]\nvoice = [\"backup\"]\n");
    check(
        &e,
        ErrorKind::UnknownGroup,
        4,
        "egress.voice[0]",
        &["`backup`"],
    );
    // Groups are read first whatever the order of the sections.
    ok("[dscp]\nef = [\"voice\"]\n[groups]\nvoice = []\n");
}

#[test]
fn bad_and_duplicate_dscp_values_are_named() {
    let e = err("[groups]\na = []\n[dscp]\naf14 = [\"a\"]\n");
    check(&e, ErrorKind::BadDscp, 4, "dscp.af14", &["0-63", "`af14`"]);
    let e = err("[dscp]\n64 = []\n");
    check(&e, ErrorKind::BadDscp, 2, "dscp.64", &[]);
    let e = err("[dscp]\nef = []\ncs5 = []\n46 = []\n");
    check(
        &e,
        ErrorKind::DuplicateDscp,
        4,
        "dscp.46",
        &["already given as ef (line 2)"],
    );
}

#[test]
fn egress_lists_take_dns_names_beside_groups_and_prefixes() {
    let c = ok(
        "[groups]\nstore = [\"10.7.0.10\"]\n\"backup.dc1\" = [\"10.8.0.0/24\"]\n\
                [egress]\nstore = [\"backup.dc1\", \"*.Backup.example.com\", \
                \"models.example-hub.io\", \"192.0.2.0/24\"]\n",
    );
    let r = &c.egress_rules()[0];
    // A defined group's name stays a group, dotted or not.
    assert_eq!(r.groups.len(), 1);
    assert_eq!(r.names, ["*.backup.example.com", "models.example-hub.io"]);
    let ms = c.groups().by_name("store");
    let dst = ip("203.0.113.77");
    assert!(!c.egress_allowed(ms, dst, &[]), "nothing names it");
    assert!(c.egress_allowed(ms, dst, &["files.backup.example.com"]));
    assert!(c.egress_allowed(ms, dst, &["x", "A.B.BACKUP.example.com."]));
    assert!(
        !c.egress_allowed(ms, dst, &["backup.example.com"]),
        "`*.` is under the name, not the name itself"
    );
    assert!(c.egress_allowed(ms, dst, &["models.example-hub.io"]));
    assert!(!c.egress_allowed(ms, dst, &["cdn.models.example-hub.io"]));
    assert!(c.egress_allowed(ms, ip("10.8.0.5"), &[]), "the group");
    assert!(c.egress_allowed(ms, ip("192.0.2.9"), &[]), "the prefix");
    assert!(c.egress_has_names());
    assert!(!ok(EXAMPLE).egress_has_names());
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(
        json["egress"][0]["names"],
        serde_json::json!(["*.backup.example.com", "models.example-hub.io"])
    );
    // Bad names, a name twice, and an undefined group (no dot: not a name) are named.
    for (item, words) in [
        ("*.", &["no name after"][..]),
        ("a..example.com", &["empty label"][..]),
        ("*.*.example.com", &["first label"][..]),
        ("bad_label.example.com", &["letters, digits"][..]),
        ("-x.example.com", &["not at an end"][..]),
    ] {
        let e = err(&format!(
            "[groups]\na = []\n[egress]\na = [\"ok.example\", \"{item}\"]\n"
        ));
        check(&e, ErrorKind::BadValue, 4, "egress.a[1]", words);
    }
    let e = err("[groups]\na = []\n[egress]\na = [\"x.example\", \"X.example\"]\n");
    check(&e, ErrorKind::DuplicatePrefix, 4, "egress.a[1]", &["twice"]);
    let e = err("[groups]\na = []\n[egress]\na = [\"backup\"]\n");
    check(&e, ErrorKind::UnknownGroup, 4, "egress.a[0]", &["`backup`"]);
}

#[test]
fn bad_egress_prefixes_are_named() {
    let e = err("[groups]\na = []\n[egress]\na = [\"10.0.0.0/8\", \"10.0.0.1/8\"]\n");
    check(&e, ErrorKind::HostBits, 4, "egress.a[1]", &["10.0.0.0/8"]);
    let e = err("[groups]\na = []\n[egress]\na = [\"10.0.0.0/8\", \"10.0.0.0/8\"]\n");
    check(&e, ErrorKind::DuplicatePrefix, 4, "egress.a[1]", &[]);
    let e = err("[groups]\na = []\n[egress]\na = [\"fd00::/200\"]\n");
    check(&e, ErrorKind::BadPrefix, 4, "egress.a[0]", &["0 to 128"]);
}

#[test]
fn an_unknown_zone_is_named_with_its_line() {
    let e = err("[work_hours]\ndays = \"mon-fri\"\nstart = \"08:00\"\nend = \"19:00\"\ntimezone = \"Europe/Berln\"\n");
    check(
        &e,
        ErrorKind::UnknownZone,
        5,
        "work_hours.timezone",
        &["\"Europe/Berln\"", "IANA"],
    );
}

#[test]
fn bad_days_and_times_are_named() {
    let wh = |days: &str, start: &str, end: &str| {
        err(&format!(
            "[work_hours]\ndays = \"{days}\"\nstart = \"{start}\"\nend = \"{end}\"\ntimezone = \"UTC\"\n"
        ))
    };
    check(
        &wh("mon-fry", "08:00", "19:00"),
        ErrorKind::BadDays,
        2,
        "work_hours.days",
        &["`fry`"],
    );
    check(
        &wh("mon", "8am", "19:00"),
        ErrorKind::BadTime,
        3,
        "work_hours.start",
        &["HH:MM"],
    );
    check(
        &wh("mon", "24:00", "19:00"),
        ErrorKind::BadTime,
        3,
        "work_hours.start",
        &["23:59"],
    );
    check(
        &wh("mon", "08:00", "19:60"),
        ErrorKind::BadTime,
        4,
        "work_hours.end",
        &[],
    );
    check(
        &wh("mon", "08:00", "08:00"),
        ErrorKind::BadTime,
        4,
        "work_hours.end",
        &["both 08:00"],
    );
}

#[test]
fn a_missing_work_hours_key_names_the_section_line() {
    let e = err("[groups]\n\n[work_hours]\ndays = \"mon\"\nstart = \"08:00\"\nend = \"09:00\"\n");
    check(
        &e,
        ErrorKind::MissingKey,
        3,
        "work_hours.timezone",
        &["IANA"],
    );
}

#[test]
fn the_json_model_names_groups() {
    let c = ok(EXAMPLE);
    let j = serde_json::to_value(&c).unwrap();
    assert_eq!(j["groups"][0]["name"], "voice");
    assert_eq!(j["groups"][0]["prefixes"][1], "fd00:4::/64");
    assert_eq!(j["groups"][2]["prefixes"][0], "10.7.0.10/32");
    assert_eq!(j["dscp"][0]["value"], 46);
    assert_eq!(j["dscp"][0]["name"], "ef");
    assert_eq!(j["dscp"][0]["groups"][0], "voice");
    assert_eq!(j["egress"][0]["group"], "model-store");
    assert_eq!(j["egress"][0]["groups"][0], "backup");
    assert_eq!(j["egress"][0]["prefixes"][0], "192.0.2.0/24");
    assert_eq!(j["work_hours"]["timezone"], "Europe/Berlin");
    assert_eq!(j["work_hours"]["days"], "mon-fri");
    assert_eq!(j["work_hours"]["overnight"], false);
}

#[test]
fn capture_settings_keep_the_flag_text_and_their_line() {
    let c = ok("[capture]\niface = \"eth1\"\nstore = \"/var/lib/capsule\"\nring_size = \"512M\"\nsnaplen = 0x60\nqueues = [0, 3]\nlevel = -10\ntake_interface = true\nmax_bytes = 1_000_000\n");
    let got: Vec<(&str, &str, usize)> = c
        .capture()
        .iter()
        .map(|s| (s.flag, s.value.as_str(), s.line))
        .collect();
    assert_eq!(
        got,
        [
            ("--iface", "eth1", 2),
            ("--store", "/var/lib/capsule", 3),
            ("--ring-size", "512M", 4),
            ("--snaplen", "96", 5),
            ("--queues", "0,3", 6),
            ("--level", "-10", 7),
            ("--take-interface", "true", 8),
            ("--max-bytes", "1000000", 9),
        ]
    );
    assert_eq!(c.capture()[2].key, "capture.ring_size");
    assert_eq!(c.capture()[2].column, 13);
}

#[test]
fn capture_keys_and_types_are_checked() {
    let e = err("[capture]\niface = \"eth1\"\nring-size = \"1G\"\n");
    check(
        &e,
        ErrorKind::UnknownKey,
        3,
        "capture.ring-size",
        &["ring_size", "fanout_group"],
    );
    let e = err("[capture]\niface = 3\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.iface",
        &["a string", "an integer 3"],
    );
    let e = err("[capture]\nsnaplen = -1\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.snaplen",
        &["non-negative"],
    );
    let e = err("[capture]\ntake_interface = \"yes\"\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.take_interface",
        &["true or false"],
    );
    let e = err("[capture]\nqueues = [0, \"1\"]\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.queues[1]",
        &["queue number"],
    );
    let e = err("[capture]\nqueues = []\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.queues",
        &["non-empty"],
    );
    let e = err("capture = \"eth0\"\n");
    check(&e, ErrorKind::WrongType, 1, "capture", &["a table"]);
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    /// Lines a config is made of, good and bad, to be shuffled and cut.
    const PIECES: &[&str] = &[
        "[groups]",
        "[dscp]",
        "[egress]",
        "[work_hours]",
        "[capture]",
        "voice = [\"10.4.0.0/24\", \"fd00:4::/64\"]",
        "gpu = [\"10.1.1.0/24\"]",
        "a = [\"10.1.1.5/24\"]",
        "b = [\"::ffff:1.2.3.4/120\"]",
        "ef = [\"voice\"]",
        "46 = [\"gpu\"]",
        "voice = [\"gpu\", \"10.0.0.0/8\"]",
        "days = \"mon-fri\"",
        "start = \"08:00\"",
        "end = \"24:00\"",
        "timezone = \"Europe/Berlin\"",
        "timezone = \"Mars/Olympus\"",
        "\"\" = []",
        "x = { y = 1 }",
        "groups.c = [\"1.1.1.1\"]",
        "= 3",
        "[[groups]]",
        "é = \"ü\"",
        "days = \"sun-sat,,\"",
    ];

    proptest! {
        #[test]
        fn any_text_gives_a_config_or_an_error_inside_it(text in "\\PC{0,200}") {
            if let Err(e) = Config::parse(&text, "t") {
                if let Some(i) = e.invalid() {
                    prop_assert!(i.line >= 1 && i.line <= text.lines().count().max(1) + 1);
                    let _ = i.to_string();
                }
            }
        }

        #[test]
        fn shuffled_pieces_never_panic(idx in proptest::collection::vec(0..PIECES.len(), 0..24)) {
            let text: String = idx.iter().map(|&i| format!("{}\n", PIECES[i])).collect();
            if let Err(e) = Config::parse(&text, "t") {
                let i = e.invalid().expect("an Invalid");
                prop_assert!(i.line >= 1 && i.line <= idx.len() + 1, "{i}");
                prop_assert!(!i.to_string().is_empty());
            }
        }
    }
}

#[test]
fn serve_settings_keep_the_flag_text_and_a_list_is_one_setting_per_element() {
    let c = ok("[serve]\nlisten = \"0.0.0.0:8443\"\nmax_queries = 4\nmax_bytes_per_query = \"10G\"\ncrl = [\"a.pem\", \"b.pem\"]\nclient_ca = \"ca.pem\"\n");
    let got: Vec<(&str, &str, &str, usize)> = c
        .serve()
        .iter()
        .map(|s| (s.key.as_str(), s.flag, s.value.as_str(), s.line))
        .collect();
    assert_eq!(
        got,
        vec![
            ("serve.listen", "--listen", "0.0.0.0:8443", 2),
            ("serve.max_queries", "--max-queries", "4", 3),
            (
                "serve.max_bytes_per_query",
                "--max-bytes-per-query",
                "10G",
                4
            ),
            ("serve.crl[0]", "--crl", "a.pem", 5),
            ("serve.crl[1]", "--crl", "b.pem", 5),
            ("serve.client_ca", "--client-ca", "ca.pem", 6),
        ]
    );
    let c = ok("[serve]\ncrl = \"one.pem\"\n");
    assert_eq!(c.serve()[0].key, "serve.crl");
    assert!(ok("").serve().is_empty());
}

#[test]
fn serve_keys_and_types_are_checked() {
    let e = err("[serve]\nlisten = \"x:1\"\nmax-queries = 3\n");
    let s = e.to_string();
    assert!(s.contains(":3:") && s.contains("serve.max-queries"), "{s}");
    let e = err("[serve]\nlisten = 8443\n");
    let s = e.to_string();
    assert!(
        s.contains(":2:") && s.contains("serve.listen") && s.contains("a string"),
        "{s}"
    );
    let e = err("[serve]\ncrl = [\"a.pem\", 3]\n");
    let s = e.to_string();
    assert!(s.contains("serve.crl[1]"), "{s}");
}

#[test]
fn several_interfaces_give_a_flag_each_and_their_own_modes() {
    let c = ok("[capture]\niface = [\"eth1\", \"eth2\"]\nstore = \"s\"\n\n\
                [capture.interfaces.eth2]\nmode = \"afpacket\"\n");
    let got: Vec<(&str, &str, &str, usize)> = c
        .capture()
        .iter()
        .map(|s| (s.key.as_str(), s.flag, s.value.as_str(), s.line))
        .collect();
    assert_eq!(
        got,
        [
            ("capture.iface[0]", "--iface", "eth1", 2),
            ("capture.iface[1]", "--iface", "eth2", 2),
            ("capture.store", "--store", "s", 3),
            (
                "capture.interfaces.eth2.mode",
                "--iface-mode",
                "eth2=afpacket",
                6
            ),
        ]
    );
    // The single string still works, and iface_mode takes the flag's own text.
    let c = ok("[capture]\niface = \"eth1\"\niface_mode = [\"eth1=xdp\"]\n");
    assert_eq!(c.capture()[1].value, "eth1=xdp");
    let e = err("[capture]\niface = []\n");
    check(&e, ErrorKind::WrongType, 2, "capture.iface", &["non-empty"]);
    let e = err("[capture]\niface = [\"eth1\", 2]\n");
    check(&e, ErrorKind::WrongType, 2, "capture.iface[1]", &["string"]);
    let e = err("[capture.interfaces.eth1]\nmode = \"afpacket\"\nring_size = \"1G\"\n");
    check(
        &e,
        ErrorKind::UnknownKey,
        3,
        "capture.interfaces.eth1.ring_size",
        &["mode"],
    );
    let e = err("[capture.interfaces.eth1]\nmode = 3\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.interfaces.eth1.mode",
        &["a string"],
    );
    let e = err("[capture]\ninterfaces = 1\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "capture.interfaces",
        &["table"],
    );
}

#[test]
fn the_cutoff_section_reads_sizes_counts_filters_and_durations() {
    let c = ok("[cutoff]\nbytes = \"64K\"\npackets = 20\n\
                keep = [\"dscp ef\", \"tcp-control\"]\nidle = \"2m\"\n");
    let cut = c.cutoff();
    assert!(cut.enabled());
    assert_eq!(
        (cut.bytes, cut.packets, cut.idle_ns),
        (65536, 20, 120_000_000_000)
    );
    let keep: Vec<_> = cut.keep.iter().map(|k| (k.key.as_str(), k.line)).collect();
    assert_eq!(keep, [("cutoff.keep[0]", 4), ("cutoff.keep[1]", 4)]);
    assert_eq!(cut.keep[1].filter, "tcp-control");
    let none = ok("");
    assert!(!none.cutoff().enabled());
    assert_eq!(none.cutoff().idle_ns, crate::DEFAULT_IDLE_NS);
    assert!(!ok("[cutoff]\nbytes = 0\n").cutoff().enabled());
}

#[test]
fn cutoff_errors_name_key_and_line() {
    let e = err("[cutoff]\nbytes = \"64Q\"\n");
    check(&e, ErrorKind::BadValue, 2, "cutoff.bytes", &["64Q", "size"]);
    let e = err("[cutoff]\nbytes = \"64K\"\npackets = -1\n");
    check(&e, ErrorKind::BadValue, 3, "cutoff.packets", &["count"]);
    let e = err("[cutoff]\n\nkeep = \"udp\"\n");
    check(&e, ErrorKind::WrongType, 3, "cutoff.keep", &["array"]);
    let e = err("[cutoff]\nkeep = [\"udp\",\n  \"\"]\n");
    check(&e, ErrorKind::BadValue, 3, "cutoff.keep[1]", &["empty"]);
    let e = err("[cutoff]\nidle = \"soon\"\n");
    check(&e, ErrorKind::BadValue, 2, "cutoff.idle", &["duration"]);
    let e = err("[cutoff]\nbytes = 1\nsnap = 1\n");
    check(
        &e,
        ErrorKind::UnknownKey,
        3,
        "cutoff.snap",
        &["bytes, packets, keep, idle"],
    );
}

#[test]
fn the_tunnels_section_lists_udp_ports_per_kind() {
    let c = ok("[tunnels]\nvxlan_ports = [4789, 8472]\ngtpu_ports = []\n");
    let t = c.tunnels();
    assert_eq!(t.vxlan_ports, [4789, 8472]);
    assert_eq!(t.geneve_ports, [6081], "a key left out keeps its default");
    assert!(t.gtpu_ports.is_empty());
    assert_eq!(ok("").tunnels(), &crate::Tunnels::default());
    let e = err("[tunnels]\nvxlan_ports = [4789, 70000]\n");
    check(
        &e,
        ErrorKind::BadValue,
        2,
        "tunnels.vxlan_ports[1]",
        &["70000", "port"],
    );
    let e = err("[tunnels]\ngeneve_ports = 6081\n");
    check(
        &e,
        ErrorKind::WrongType,
        2,
        "tunnels.geneve_ports",
        &["array"],
    );
    let e = err("[tunnels]\nnvgre_ports = [1]\n");
    check(
        &e,
        ErrorKind::UnknownKey,
        2,
        "tunnels.nvgre_ports",
        &["vxlan_ports"],
    );
}

#[test]
fn a_tier_section_parses_with_defaults_and_the_config_dir_resolves_the_credentials() {
    let c = ok("[tier]\nendpoint = \"http://127.0.0.1:8333/\"\nbucket = \"capsule\"\n\
                credentials_file = \"tier.cred\"\nprefix = \"site-a/probe-1/\"\nmax_age = \"90d\"\n");
    let t = c.tier().unwrap();
    assert_eq!(t.endpoint, "http://127.0.0.1:8333");
    assert_eq!(
        (t.bucket.as_str(), t.prefix.as_str()),
        ("capsule", "site-a/probe-1")
    );
    assert_eq!(t.region, DEFAULT_REGION);
    assert!(t.path_style);
    assert_eq!(t.max_age_ns, Some(90 * 86_400 * 1_000_000_000));
    assert_eq!(t.upload_rate_bps, None, "no bound unless given");
    let c = ok("[tier]\nendpoint = \"http://h:1\"\nbucket = \"capsule\"\n\
                credentials_file = \"c\"\nupload_rate = \"200M\"\n");
    assert_eq!(c.tier().unwrap().upload_rate_bps, Some(200_000_000));
    let d = tempfile_dir();
    let p = d.join("c.toml");
    std::fs::write(
        &p,
        "[tier]\nendpoint = \"https://s3.example\"\nbucket = \"b-1\"\n\
                        credentials_file = \"tier.cred\"\npath_style = false\n\
                        cache_dir = \"cache\"\n",
    )
    .unwrap();
    let t = Config::load(&p).unwrap().tier.unwrap();
    assert_eq!(t.credentials_file, d.join("tier.cred"));
    assert!(!t.path_style);
    assert_eq!(t.cache_dir, Some(d.join("cache")), "beside the config too");
    assert_eq!(c.tier().unwrap().cache_dir, None, "none unless given");
    std::fs::remove_dir_all(&d).unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("capsule-config-tier-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn tier_errors_name_the_field_and_what_was_wrong() {
    let e = err("[tier]\nbucket = \"capsule\"\ncredentials_file = \"c\"\n");
    check(
        &e,
        ErrorKind::MissingKey,
        1,
        "tier.endpoint",
        &["http://HOST:PORT"],
    );
    let e =
        err("[tier]\nendpoint = \"s3.example\"\nbucket = \"capsule\"\ncredentials_file = \"c\"\n");
    check(
        &e,
        ErrorKind::BadValue,
        2,
        "tier.endpoint",
        &["\"s3.example\""],
    );
    let e =
        err("[tier]\nendpoint = \"http://h:1\"\nbucket = \"Caps_ule\"\ncredentials_file = \"c\"\n");
    check(
        &e,
        ErrorKind::BadValue,
        3,
        "tier.bucket",
        &["lowercase", "\"Caps_ule\""],
    );
    let e = err("[tier]\nendpoint = \"http://h:1\"\nbucket = \"capsule\"\ncredentials_file = \"c\"\nprefix = \"/x\"\n");
    check(
        &e,
        ErrorKind::BadValue,
        5,
        "tier.prefix",
        &["leading \"/\""],
    );
    let e = err("[tier]\nendpoint = \"http://h:1\"\nbucket = \"capsule\"\ncredentials_file = \"c\"\nmax_age = \"soon\"\n");
    check(&e, ErrorKind::BadValue, 5, "tier.max_age", &["duration"]);
    let e = err("[tier]\nendpoint = \"http://h:1\"\nbucket = \"capsule\"\ncredentials_file = \"c\"\nupload_rate = \"fast\"\n");
    check(
        &e,
        ErrorKind::BadValue,
        5,
        "tier.upload_rate",
        &["bits per second", "\"fast\""],
    );
    let e =
        err("[tier]\nendpoint = \"http://h:1\"\nbucket = \"capsule\"\ncredentials_file = \"\"\n");
    check(
        &e,
        ErrorKind::BadValue,
        4,
        "tier.credentials_file",
        &["empty"],
    );
    let e = err("[tier]\nendpoint = \"http://h:1\"\nbucket = \"capsule\"\ncredentials_file = \"c\"\nacl = \"x\"\n");
    check(&e, ErrorKind::UnknownKey, 5, "tier.acl", &["endpoint"]);
}
