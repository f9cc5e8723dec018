//! Restarting the test server: the data stays, old connections are gone,
//! new ones work, and the admin connection is renewed. (On the fault
//! server: a restart disturbs every test on the server.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn a_restart_keeps_the_data_and_drops_the_connections() {
    let Some(server) = uwf_pg_testing::fault_server() else {
        return;
    };
    let db = server.create_database();
    let mut before = db.client();
    before
        .batch_execute("CREATE TABLE t (n int); INSERT INTO t VALUES (7)")
        .unwrap();

    server.shut_down();
    assert!(postgres::Client::connect(&db.url, postgres::NoTls).is_err());
    server.start_again();

    assert!(before.query_one("SELECT n FROM t", &[]).is_err());
    let n: i32 = db
        .client()
        .query_one("SELECT n FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 7);
    // The admin connection works again: new databases can be made.
    let other = server.create_database();
    server.restart();
    let n: i32 = other.client().query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(n, 1);
}
