//! openraft's own storage test suite (`openraft::testing::log::Suite`) against the redb log
//! store and the state-machine store: appends, reads, truncation, purge, vote, committed id,
//! applied state, membership, snapshot build and transfer. Each case gets a fresh data
//! directory.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_storage_suite
//! ```

use hivekeeper_coordinator::raft::{LogStore, RaftConfig, StateMachineStore, Storage, TypeConfig};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{ErrorSubject, ErrorVerb, StorageError};
use tempfile::TempDir;

/// Opens a fresh node store in a new temporary directory; the directory is the guard.
struct RedbStoreBuilder;

/// openraft's storage error for a store that could not be set up.
fn setup_failed(error: impl std::fmt::Display) -> StorageError<TypeConfig> {
    StorageError::from_io_error(
        ErrorSubject::Store,
        ErrorVerb::Write,
        std::io::Error::other(error.to_string()),
    )
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RedbStoreBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(setup_failed)?;
        let storage = Storage::open(dir.path(), 0, &RaftConfig::DEFAULTS)
            .await
            .map_err(setup_failed)?;
        Ok((dir, storage.log_store, storage.state_machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redb_store_passes_openraft_storage_suite() {
    Suite::test_all(RedbStoreBuilder)
        .await
        .expect("openraft's storage suite passes");
}
