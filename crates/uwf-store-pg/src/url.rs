//! Store URLs: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?…]` (or
//! `postgresql://`), with a Unix socket directory as `?host=/dir`.
//!
//! The password is cut out of the URL (from the user part or a `password=`
//! parameter) before anything else sees it: the rest is parsed by the
//! client library and shown in messages; the password only goes into the
//! connection configuration.

use crate::error::PgError;

/// Server-side TCP keepalives of every session (ignored on Unix sockets);
/// options given in the URL come first and are kept.
pub(crate) const SERVER_KEEPALIVES: &str =
    "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3";

/// Client-side keepalive idle time.
const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// A parsed store URL.
pub(crate) struct StoreUrl {
    /// The URL without its password, for messages.
    pub(crate) display: String,
    /// The connection configuration, password included.
    pub(crate) config: postgres::Config,
    /// The password (from the URL, else from the caller), to redact it.
    pub(crate) password: Option<String>,
}

/// Parses `url`; `fallback_password` is used when the URL has none (like
/// libpq's `PGPASSWORD`).
pub(crate) fn parse(url: &str, fallback_password: Option<&str>) -> Result<StoreUrl, PgError> {
    let (display, from_url) = strip_password(url)?;
    let bad = |reason: String| PgError::Url {
        url: display.clone(),
        reason,
    };
    let mut config: postgres::Config = display.parse().map_err(|e: postgres::Error| {
        let mut msg = e.to_string();
        if let Some(src) = std::error::Error::source(&e) {
            msg.push_str(": ");
            msg.push_str(&src.to_string());
        }
        bad(msg)
    })?;
    if config.get_hosts().is_empty() {
        return Err(bad(
            "it names no host (give HOST, or ?host=/socket/dir for a Unix socket)".into(),
        ));
    }
    if config.get_dbname().is_none() {
        return Err(bad("it names no database (add /DATABASE)".into()));
    }
    if config.get_user().is_none_or(str::is_empty) {
        return Err(bad("it names no user (add USER@ before the host)".into()));
    }
    let password = from_url.or_else(|| fallback_password.map(str::to_owned));
    if let Some(p) = &password {
        config.password(p.as_bytes());
    }
    if config.get_application_name().is_none() {
        config.application_name("uwf");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    // A machine that vanishes (power, network) must not keep its
    // concurrency slots for the operating system's default two hours: the
    // server drops a silent TCP session after about 25 s, which releases
    // its advisory locks, and the client notices as soon.
    let options = match config.get_options() {
        Some(o) if !o.trim().is_empty() => format!("{o} {SERVER_KEEPALIVES}"),
        _ => SERVER_KEEPALIVES.to_owned(),
    };
    config.options(&options);
    config.keepalives(true);
    config.keepalives_idle(KEEPALIVE_IDLE);
    config.keepalives_interval(std::time::Duration::from_secs(5));
    config.keepalives_retries(3);
    Ok(StoreUrl {
        display,
        config,
        password,
    })
}

/// Splits `url` into the URL without its password and the (decoded)
/// password.
fn strip_password(url: &str) -> Result<(String, Option<String>), PgError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(PgError::Url {
            url: "(not shown: not a URL)".into(),
            reason: "it does not start with postgres:// or postgresql://".into(),
        });
    };
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(PgError::Url {
            url: format!("{scheme}://…"),
            reason: "the scheme must be postgres:// or postgresql://".into(),
        });
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let mut password = None;
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, pw)) => {
                password = Some(percent_decode(pw));
                format!("{user}@{hosts}")
            }
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let mut kept = Vec::new();
            for pair in query.split('&') {
                match pair.split_once('=') {
                    Some(("password", value)) => password = Some(percent_decode(value)),
                    _ if pair == "password" => {}
                    _ => kept.push(pair),
                }
            }
            if kept.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_owned(),
    };
    Ok((format!("{scheme}://{authority}{tail}"), password))
}

/// Decodes `%XX` escapes (invalid ones are kept as they are).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(url: &str) -> (String, Option<String>) {
        match strip_password(url) {
            Ok(v) => v,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    #[test]
    fn the_password_is_cut_out_wherever_it_is() {
        assert_eq!(
            strip("postgres://u:s%40cret@db.example:5433/uwf"),
            (
                "postgres://u@db.example:5433/uwf".into(),
                Some("s@cret".into())
            )
        );
        assert_eq!(
            strip("postgresql://u@/uwf?host=/run/pg&password=pw%2F1&sslmode=disable"),
            (
                "postgresql://u@/uwf?host=/run/pg&sslmode=disable".into(),
                Some("pw/1".into())
            )
        );
        assert_eq!(
            strip("postgres://u@h/db?password=x"),
            ("postgres://u@h/db".into(), Some("x".into()))
        );
        assert_eq!(
            strip("postgres://u@h/db"),
            ("postgres://u@h/db".into(), None)
        );
        // An `@` in the password itself (unescaped): the last `@` ends it.
        assert_eq!(
            strip("postgres://u:a@b@h/db"),
            ("postgres://u@h/db".into(), Some("a@b".into()))
        );
    }

    #[test]
    fn urls_parse_into_a_configuration() {
        let Ok(u) = parse("postgres://uwf:pw@localhost:5433/store", None) else {
            panic!("parse")
        };
        assert_eq!(u.display, "postgres://uwf@localhost:5433/store");
        assert_eq!(u.config.get_ports(), &[5433]);
        assert_eq!(u.config.get_dbname(), Some("store"));
        assert_eq!(u.config.get_password(), Some(&b"pw"[..]));
        let Ok(u) = parse("postgresql://uwf@/store?host=/tmp/sock", Some("env-pw")) else {
            panic!("parse socket")
        };
        assert!(matches!(
            u.config.get_hosts(),
            [postgres::config::Host::Unix(p)] if p.as_os_str() == "/tmp/sock"
        ));
        assert_eq!(u.password.as_deref(), Some("env-pw"));
        assert!(!format!("{:?}", u.config).contains("env-pw"));
        assert_eq!(u.config.get_options(), Some(SERVER_KEEPALIVES));
        let Ok(u) = parse("postgres://u@h/db?options=-c%20search_path%3Duwf", None) else {
            panic!("parse options")
        };
        assert_eq!(
            u.config.get_options(),
            Some(format!("-c search_path=uwf {SERVER_KEEPALIVES}").as_str())
        );
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_the_password() {
        for url in [
            "mysql://u:hunter2@h/db",
            "u:hunter2@h/db",
            "postgres://u:hunter2@h",
            "postgres://:hunter2@h/db",
            "postgres://u:hunter2@h:notaport/db",
            "host=h password=hunter2",
        ] {
            match parse(url, None) {
                Ok(_) => panic!("{url} was accepted"),
                Err(e) => {
                    let text = format!("{e} {e:?}");
                    assert!(!text.contains("hunter2"), "{url}: {text}");
                }
            }
        }
    }

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(percent_decode("a%20b%zz%4"), "a b%zz%4");
    }
}
