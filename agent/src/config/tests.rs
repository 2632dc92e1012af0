use super::peers::{parse_peer, parse_peers_file};
use super::*;

fn parse(args: &[&str]) -> Result<Cli, CliExit> {
    Cli::parse_from_args(std::iter::once("meshlimit-agent").chain(args.iter().copied()))
}

#[test]
fn defaults_follow_the_contract() {
    let cli = parse(&["run", "--rules", "r.yaml"]).unwrap();
    let Command::Run(args) = cli.command;
    assert_eq!(args.listen.to_string(), "127.0.0.1:8081");
    assert_eq!(args.store, StoreSpec::Memory);
    assert_eq!((args.lease_ttl_ms, args.lease_target_ms), (300, 100));
    assert_eq!(args.rules_poll_ms, 500);
}

#[test]
fn mistakes_are_one_line_and_exit_64() {
    for args in [
        &["run", "--rules", "r", "--bogus"][..],
        &["run"],
        &["run", "--rules", "r", "--listen", "nope"],
        &["run", "--rules", "r", "--store", "etcd://x"],
        &["run", "--rules", "r", "--lease-ttl-ms", "0"],
        &[],
        &["check-rules"],
    ] {
        let exit = parse(args).unwrap_err();
        assert_eq!(exit.code, EXIT_USAGE, "{args:?}");
        assert!(!exit.message.contains('\n'), "{args:?}: {}", exit.message);
    }
    let missing = parse(&["run"]).unwrap_err().message;
    assert!(missing.contains("--rules"), "{missing}");
    let none = parse(&[]).unwrap_err().message;
    assert!(none.contains("subcommand is required"), "{none}");
}

#[test]
fn help_and_version_exit_0() {
    assert_eq!(parse(&["--help"]).unwrap_err().code, 0);
    assert_eq!(parse(&["--version"]).unwrap_err().code, 0);
    assert_eq!(parse(&["run", "--help"]).unwrap_err().code, 0);
}

#[test]
fn store_specs() {
    assert_eq!(
        StoreSpec::parse("redis+cluster://a:1,b:2"),
        Ok(StoreSpec::RedisCluster(vec!["a:1".into(), "b:2".into()]))
    );
    assert!(StoreSpec::parse("redis+cluster://a").is_err());
    let cli = parse(&[
        "run",
        "--rules",
        "r",
        "--peer-region",
        "us=redis://a:1",
        "--peer-region",
        "ap=redis+cluster://b:1,c:2",
        "--region-floor",
        "0.2",
    ])
    .unwrap();
    let Command::Run(args) = cli.command;
    assert_eq!(args.peer_regions.len(), 2);
    assert_eq!(args.peer_regions[1].0, "ap");
    assert_eq!(args.region_floor, 0.2);
    for bad in [&["--peer-region", "us"][..], &["--region-floor", "0.7"]] {
        let args = [&["run", "--rules", "r"][..], bad].concat();
        assert_eq!(parse(&args).unwrap_err().code, EXIT_USAGE, "{bad:?}");
    }
    assert_eq!(
        StoreSpec::parse("redis://127.0.0.1:6379").map(|s| s.to_string()),
        Ok("redis://127.0.0.1:6379".to_string())
    );
}

fn run_args(args: &[&str]) -> RunArgs {
    let all = [&["run", "--rules", "r"][..], args].concat();
    match parse(&all).map(|c| c.command) {
        Ok(Command::Run(args)) => *args,
        other => panic!("{other:?}"),
    }
}

#[test]
fn tls_schemes() {
    assert_eq!(
        StoreSpec::parse("rediss://a:1"),
        Ok(StoreSpec::RedisTls("a:1".into()))
    );
    let cluster = StoreSpec::parse("rediss+cluster://a:1,b:2").unwrap();
    assert_eq!(cluster.to_string(), "rediss+cluster://a:1,b:2");
    let target = cluster.redis().unwrap();
    assert!(target.cluster && target.tls);
    assert!(
        !StoreSpec::parse("redis://a:1")
            .unwrap()
            .redis()
            .unwrap()
            .tls
    );
    assert!(StoreSpec::parse("rediss://a").is_err());
    // A client certificate needs its key.
    let exit = parse(&["run", "--rules", "r", "--redis-cert", "c.pem"]).unwrap_err();
    assert_eq!(exit.code, EXIT_USAGE);
}

#[test]
fn passwords_never_print() {
    let args = run_args(&["--redis-password", "hunter2", "--store", "redis://a:1"]);
    let dump = format!("{args:?}");
    assert!(!dump.contains("hunter2"), "{dump}");
    assert!(dump.contains("<redacted>"), "{dump}");
    let connect = args.redis_connect().unwrap();
    assert_eq!(connect.password, Some(Password::from("hunter2")));
    assert!(!format!("{connect:?}").contains("hunter2"));
    assert_eq!(Password::from("x").to_string(), "<redacted>");
}

#[test]
fn each_region_has_its_own_credentials() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("us-east.password"), "from-file\n").unwrap();
    std::fs::write(dir.path().join("us-east.username"), "us-user\n").unwrap();
    let own = dir.path().join("own.password");
    std::fs::write(&own, "own-secret\n").unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let own_arg = own.to_str().unwrap();
    let args = run_args(&[
        "--store",
        "redis://a:1",
        "--redis-password-file",
        own_arg,
        "--region-credentials-dir",
        dir_arg,
    ]);
    let env = |name: &str| match name {
        "MESHLIMIT_REDIS_PASSWORD_AP_SOUTH_1" => Some("from-env".to_string()),
        _ => None,
    };
    let spec = StoreSpec::parse("rediss://b:2").unwrap();
    let password = |region: &str| args.region_connect(region, &spec, env).unwrap().password;
    assert_eq!(
        args.redis_connect().unwrap().password,
        Some(Password::from("own-secret"))
    );
    assert_eq!(password("us-east"), Some(Password::from("from-file")));
    assert_eq!(password("ap-south.1"), Some(Password::from("from-env")));
    // Never this region's password.
    assert_eq!(password("eu"), None);
    let us = args.region_connect("us-east", &spec, env).unwrap();
    assert_eq!(us.username.as_deref(), Some("us-user"));
    assert!(us.tls);
    // A password flag and a password file conflict.
    let both = [
        "run",
        "--rules",
        "r",
        "--redis-password",
        "x",
        "--redis-password-file",
        own_arg,
    ];
    assert_eq!(parse(&both).unwrap_err().code, EXIT_USAGE);
}

#[test]
fn what_is_built_without_flags_takes_the_flags_defaults() {
    let args = run_args(&[]);
    assert_eq!(
        args.lease_settings(),
        crate::leases::LeaseSettings::default()
    );
    assert_eq!(args.server_limits(), crate::server::ServerLimits::default());
    assert_eq!(args.max_keys(), defaults::max_keys());
}

/// Every default of `run` shows in `--help`, which the book's reference page
/// of the agent's flags is generated from (cli/tests/it/reference.rs holds the
/// page to it).
#[test]
fn help_shows_every_default() {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    let help = cli
        .find_subcommand_mut("run")
        .unwrap()
        .render_long_help()
        .to_string();
    let run = Cli::command();
    let run = run.find_subcommand("run").unwrap();
    let mut checked = 0;
    for arg in run.get_arguments() {
        let (Some(long), [default]) = (arg.get_long(), arg.get_default_values()) else {
            continue;
        };
        let default = default.to_string_lossy();
        assert!(
            help.contains(&format!("[default: {default}]")),
            "--{long}: default {default} not in --help"
        );
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} defaults found in --help");
}

#[test]
fn peers_parse_from_flags_and_files() {
    assert_eq!(
        parse_peer("eu=redis://10.0.0.1:6379"),
        Ok(("eu".into(), StoreSpec::Redis("10.0.0.1:6379".into())))
    );
    assert!(parse_peer("eu").is_err());
    assert!(parse_peer("e u=redis://a:1").is_err());
    assert!(parse_peer("eu=memory").is_err());
    let file = "# peers\n\nus=redis+cluster://a:1,b:2\n  ap = redis://c:3\n";
    let peers = parse_peers_file(file).unwrap();
    assert_eq!(peers.len(), 2);
    assert_eq!(peers[1].0, "ap");
    let bad = parse_peers_file("us=redis://a:1\nnonsense\n").unwrap_err();
    assert_eq!(
        bad.to_string(),
        "line 2: `nonsense`: expected NAME=redis://HOST:PORT"
    );
}

#[test]
fn store_and_peer_refusals_read_word_for_word() {
    let refused = |text: &str| StoreSpec::parse(text).unwrap_err().to_string();
    assert_eq!(
        refused("redis+cluster://a"),
        "`redis+cluster://a`: expected redis+cluster://HOST:PORT,HOST:PORT,…"
    );
    assert_eq!(
        refused("rediss+cluster://a:1,b"),
        "`rediss+cluster://a:1,b`: expected rediss+cluster://HOST:PORT,HOST:PORT,…"
    );
    assert_eq!(
        refused("rediss://a"),
        "`rediss://a`: expected rediss://HOST:PORT"
    );
    assert_eq!(
        refused(" etcd://x "),
        "unknown store `etcd://x`: expected memory, redis://HOST:PORT or \
         redis+cluster://HOST:PORT,… (rediss for TLS)"
    );
    let peer = |text: &str| parse_peer(text).unwrap_err().to_string();
    assert_eq!(peer("eu"), "`eu`: expected NAME=redis://HOST:PORT");
    assert_eq!(
        peer("e u=redis://a:1"),
        "`e u`: a region is 1 to 63 characters of [A-Za-z0-9._-]"
    );
    assert_eq!(
        peer("eu=memory"),
        "region eu: a peer region needs a Redis URL"
    );
    assert_eq!(
        peer("eu=redis://a"),
        "`redis://a`: expected redis://HOST:PORT"
    );
}
