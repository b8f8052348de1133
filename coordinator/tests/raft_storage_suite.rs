//! openraft's own storage test suite (`openraft::testing::Suite`) against the redb log store and
//! the state-machine store: appends, reads, truncation, purge, vote, committed id, applied
//! state, membership, snapshot build and transfer. Each case gets a fresh data directory.
//!
//! ```text
//! cargo test -p hivekeeper-coordinator --test raft_storage_suite
//! ```

use hivekeeper_coordinator::raft::{
    LogStore, RaftConfig, StateMachineStore, Storage, StorageError, TypeConfig,
};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageIOError};
use tempfile::TempDir;

/// Opens a fresh node store in a new temporary directory; the directory is the guard.
struct RedbStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RedbStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir =
            tempfile::tempdir().map_err(|error| StorageIOError::write(AnyError::new(&error)))?;
        let storage = Storage::open(dir.path(), 0, RaftConfig::DEFAULTS.cache_bytes())
            .await
            .map_err(|error| StorageIOError::write(AnyError::new(&error)))?;
        Ok((dir, storage.log_store, storage.state_machine))
    }
}

#[test]
fn the_redb_store_passes_openraft_storage_suite() {
    Suite::test_all(RedbStoreBuilder).expect("openraft's storage suite passes");
}
