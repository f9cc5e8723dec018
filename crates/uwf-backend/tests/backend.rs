//! The registry of backends, and a backend added from outside: the toy of
//! `examples/toy_backend.rs`, opened through [`Backends`], passes the
//! storage contract suites every built-in backend passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../examples/toy_backend.rs"]
mod toy;

use std::path::Path;

use uwf_backend::{BackendError, Backends, LocationSource, Opened, StoreLocation};

/// A fresh toy store opened through the registry, and the directory it
/// lives in.
fn toy_store() -> (Opened, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let backends = Backends::new().with(toy::MemBackend::new(dir.path().join("mem")));
    let opened = backends
        .open(dir.path(), &StoreLocation::Url("mem://contract".into()))
        .unwrap();
    (opened, dir)
}

mod toy_objects {
    uwf_cas::store_contract_tests!({
        let (opened, dir) = super::toy_store();
        (opened.stores.objects, dir)
    });
}

mod toy_state {
    uwf_state::thread_store_contract_tests!(dyn {
        let (opened, dir) = super::toy_store();
        (opened.stores.state, dir)
    });
}

#[test]
fn a_url_no_backend_opens_is_refused_saying_what_can_be_opened() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreLocation::Url("mem://u:secret-pw@x".into());
    let bare = Backends::new().open(dir.path(), &url).unwrap_err();
    assert!(
        matches!(bare, BackendError::UnknownScheme { .. }),
        "{bare:?}"
    );
    let text = bare.to_string();
    assert!(text.contains("mem://u:***@x"), "{text}");
    assert!(text.contains("only a directory"), "{text}");
    assert!(!text.contains("secret-pw"), "{text}");

    let with_toy = Backends::new().with(toy::MemBackend::new(dir.path()));
    let other = StoreLocation::Url("mysql://h/db".into());
    let text = with_toy.open(dir.path(), &other).unwrap_err().to_string();
    assert!(text.contains("a directory or a mem:// URL"), "{text}");
    assert_eq!(
        with_toy.kind(&url, LocationSource::Flag).unwrap(),
        "mem",
        "the scheme picks the backend"
    );
    assert!(with_toy.kind(&other, LocationSource::Env).is_err());
}

#[test]
fn a_backend_s_own_error_comes_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let backends = Backends::new().with(toy::MemBackend::new(dir.path()));
    let e = backends
        .open(dir.path(), &StoreLocation::Url("mem://../escape".into()))
        .unwrap_err();
    assert!(matches!(e, BackendError::Backend(_)), "{e:?}");
    assert!(e.to_string().contains("is not mem://NAME"), "{e}");
    assert!(!e.is_unavailable());
    let code = miette::Diagnostic::code(&e).map(|c| c.to_string());
    assert_eq!(code.as_deref(), Some("toy::bad_name"));
}

#[test]
fn the_stores_of_one_name_are_one_store_and_agents_learn_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let backends = Backends::new().with(toy::MemBackend::new(dir.path().join("mem")));
    let url = StoreLocation::Url("mem://shared".into());
    let (a, b) = (
        backends.open(dir.path(), &url).unwrap(),
        backends.open(dir.path(), &url).unwrap(),
    );
    let cas = uwf_cas::Cas::new(a.stores.objects.clone()).unwrap();
    let stored = cas
        .put_schema(serde_json::json!({ "type": "object" }))
        .unwrap();
    assert!(b.stores.objects.has(stored.hash).unwrap());
    let env: Vec<(&str, &std::ffi::OsStr)> = a
        .agent_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_os_str()))
        .collect();
    assert!(
        env.contains(&(uwf_backend::STORE_ENV, "mem://shared".as_ref())),
        "{env:?}"
    );
    assert_eq!(a.run_dir, dir.path());
    assert!(!a.relayed);
}

#[test]
fn a_directory_is_the_filesystem_store_whatever_is_registered() {
    let dir = tempfile::tempdir().unwrap();
    let opened = Backends::new()
        .open(dir.path(), &StoreLocation::Dir(dir.path().to_path_buf()))
        .unwrap();
    // Its engine serves its agents a relay that checks what they store;
    // no relay is named here, so it is not relayed itself.
    assert!(opened.serve_relay && !opened.relayed);
    assert!(!opened.stores.objects.checks_types());
    assert!(opened.stores.runs.is_some());
    assert!(opened.secrets.is_empty());
    assert_eq!(
        Backends::new()
            .kind(&StoreLocation::Dir(dir.path().into()), LocationSource::Root)
            .unwrap(),
        "filesystem"
    );
    assert!(Path::new(&dir.path().join("cas")).is_dir());
}

#[test]
fn a_password_in_the_url_is_a_secret_of_the_store_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let backends = Backends::new().with(toy::MemBackend::new(dir.path()));
    let url = StoreLocation::Url("mem://u:s3cr%40t-pw@demo".into());
    let opened = backends.open(dir.path(), &url).unwrap();
    let secrets: Vec<&str> = opened.secrets.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(secrets, ["s3cr%40t-pw", "s3cr@t-pw"]);
    assert_eq!(url.display(), "mem://u:***@demo");
    assert!(!format!("{opened:?}").contains("s3cr"));
}
