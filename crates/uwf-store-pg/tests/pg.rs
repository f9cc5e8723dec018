//! The PostgreSQL backend against a real server (started by
//! `uwf_store_pg::testing`; skipped loudly without the server binaries,
//! failing instead under `CI=true`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use uwf_store_pg::PgStore;
use uwf_store_pg::testing::{self, TestDb};

/// A store on a fresh database, or `None` when skipped.
fn fresh() -> Option<(PgStore, TestDb)> {
    let db = testing::database()?;
    let store = PgStore::connect(&db.url, None).unwrap();
    Some((store, db))
}

/// The CAS contract of `uwf-cas`, the same test bodies the filesystem and
/// memory stores pass.
mod cas_contract {
    uwf_cas::store_contract_tests!({
        let Some(pair) = super::fresh() else { return };
        pair
    });
}

/// The `ThreadStore` contract of `uwf-state`, the same test bodies the
/// filesystem backend passes.
mod state_contract {
    uwf_state::thread_store_contract_tests!({
        let Some(pair) = super::fresh() else { return };
        pair
    });
}
