//! The committed peer files, and the `import` command, run in process.

use super::*;

/// The committed peer files (`cli/tests/fixtures/import/`, which `cli_import`
/// imports through the binary), imported in-process with the same `--map`s:
/// the rules text, or the refusals, byte for byte as committed beside them
/// (`<fixture>.imported.yaml`, `<fixture>.refusals.txt`). After a deliberate
/// change of the importers, `MESHLIMIT_WRITE_IMPORTS=1 cargo test -p
/// meshlimit-cli --lib the_committed_peer_files` rewrites them; the diff is
/// then the change a user sees.
#[test]
fn the_committed_peer_files_import_to_the_committed_rules_and_refusals() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import");
    let edge = [
        "generic_key:reports=path_prefix:/reports/",
        "api_key=header:x-api-key",
        "http_method=method",
        "path=path",
    ];
    let shop = [
        "req.method=method",
        "req.path=path",
        "user_id=header:x-user-id",
        "tenant=header:x-tenant",
    ];
    let refused = [
        "user=header:x-user",
        "tenant=header:x-tenant",
        "bot=header:x-bot",
    ];
    let write = std::env::var_os("MESHLIMIT_WRITE_IMPORTS").is_some();
    let mut stale = Vec::new();
    for (format, file, map, expected) in [
        (
            ImportFormat::EnvoyRatelimit,
            "ratelimit-edge.yaml",
            &edge[..],
            "ratelimit-edge.imported.yaml",
        ),
        (
            ImportFormat::Limitador,
            "limitador-limits.yaml",
            &shop[..],
            "limitador-limits.imported.yaml",
        ),
        (
            ImportFormat::EnvoyRatelimit,
            "ratelimit-refused.yaml",
            &refused[..],
            "ratelimit-refused.refusals.txt",
        ),
        (
            ImportFormat::Limitador,
            "limitador-refused.yaml",
            &shop[..3],
            "limitador-refused.refusals.txt",
        ),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let imported = convert(format, file, &text, &mapping(map));
        let got = if imported.errors.is_empty() {
            render(&imported, &format!("{} `{file}`", format.as_str())).unwrap()
        } else {
            errors(&imported).iter().map(|e| format!("{e}\n")).collect()
        };
        let path = dir.join(expected);
        if write {
            std::fs::write(&path, &got).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(got.as_str()) {
            stale.push(format!("{expected}, now:\n{got}"));
        }
    }
    assert!(
        stale.is_empty(),
        "not as committed (MESHLIMIT_WRITE_IMPORTS=1 rewrites them):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_command_says_how_many_rules_it_imported_or_refusals_it_found() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import");
    let run = |file: &str, map: &[&str]| {
        let args = ImportArgs {
            from: ImportFormat::EnvoyRatelimit,
            map: map.iter().map(|m| m.to_string()).collect(),
            out: None,
            file: dir.join(file),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = CliError::code_of(&import(&args, &mut out, &mut err));
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (code, text(out), text(err))
    };
    let (code, out, err) = run(
        "ratelimit-edge.yaml",
        &[
            "api_key=header:x-api-key",
            "generic_key:reports=path_prefix:/reports/",
            "http_method=method",
            "path=path",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("# Imported by `meshlimit import`"), "{out}");
    assert!(
        err.ends_with("ratelimit-edge.yaml: 6 rules imported\n"),
        "{err}"
    );
    let (code, out, err) = run(
        "ratelimit-refused.yaml",
        &[
            "user=header:x-user",
            "tenant=header:x-tenant",
            "bot=header:x-bot",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.ends_with("ratelimit-refused.yaml: not imported (5 refusals); nothing written\n"),
        "{err}"
    );
}
