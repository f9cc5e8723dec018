//! The proxy against the real test server, with a plain client: queries
//! go through, a cut drops the connection and refuses new ones, a heal
//! lets them through again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use postgres::{Client, NoTls};

fn one(client: &mut Client) -> Result<i32, postgres::Error> {
    client.query_one("SELECT 1", &[]).map(|r| r.get(0))
}

#[test]
fn a_cut_drops_connections_and_refuses_new_ones_until_healed() {
    let Some(server) = uwf_pg_testing::server() else {
        return;
    };
    let db = server.create_database();
    let (port, proxy) = server.proxy();
    assert_eq!(proxy.port(), port);
    let url = db.url_through(port, true);
    let mut client = Client::connect(&url, NoTls).unwrap();
    assert_eq!(one(&mut client).unwrap(), 1);
    assert_eq!(proxy.open_connections(), 1);

    proxy.cut();
    assert!(proxy.is_cut());
    assert!(
        one(&mut client).is_err(),
        "the open connection survived the cut"
    );
    let refused = Client::connect(&url, NoTls).map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("connect"), "{refused}");
    // The server itself is fine: its socket answers.
    assert_eq!(one(&mut db.client()).unwrap(), 1);

    proxy.heal();
    let mut again = Client::connect(&url, NoTls).unwrap();
    assert_eq!(one(&mut again).unwrap(), 1);
    assert!(proxy.accepted() >= 2);
}

#[test]
fn the_proxy_stops_with_its_last_handle() {
    let Some(server) = uwf_pg_testing::server() else {
        return;
    };
    let db = server.create_database();
    let (port, proxy) = server.proxy();
    let url = db.url_through(port, true);
    let mut client = Client::connect(&url, NoTls).unwrap();
    let clone = proxy.clone();
    drop(proxy);
    assert_eq!(one(&mut client).unwrap(), 1, "a clone keeps it running");
    drop(clone);
    assert!(one(&mut client).is_err());
}
