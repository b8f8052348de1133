//! A full disk is an error, never a panic: the log fills a 64 KiB tmpfs, the preallocation of
//! the next segment fails with ENOSPC, later writes are refused, and a reopen finds every entry
//! that was acknowledged.
//!
//! Mounting a tmpfs needs root (CI and the dev machines run as root); elsewhere the test says
//! it was skipped and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use hivekeeper_segment_log::{SegmentLog, SegmentLogConfig, SegmentLogError};

/// Unmounts the tmpfs however the test ends.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tiny(at: &Path) -> Option<Mounted> {
    std::fs::create_dir_all(at).expect("the mount point");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(at)
        .output()
        .ok()?;
    mounted.status.success().then(|| Mounted(at.to_path_buf()))
}

/// A log directory on its own 64 KiB tmpfs, unmounted when dropped (before the temporary
/// directory it is mounted in goes: fields drop in order).
struct TinyDisk {
    _mounted: Mounted,
    root: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

/// One tiny disk at a time: a `mount` or `umount` child forked by one test briefly holds every
/// open file of the process, the other test's log lock included, so its reopen would find
/// the log in use.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl TinyDisk {
    /// 16 KiB segments: four fill the disk.
    const CONFIG: SegmentLogConfig = SegmentLogConfig {
        segment_bytes: 16 * 1024,
    };

    fn mount() -> Option<TinyDisk> {
        let serial = SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let root = tempfile::tempdir().expect("temp dir");
        let mounted = mount_tiny(&root.path().join("tiny"))?;
        Some(TinyDisk {
            _mounted: mounted,
            root,
            _serial: serial,
        })
    }

    fn dir(&self) -> PathBuf {
        self.root.path().join("tiny").join("log")
    }
}

#[test]
fn a_full_disk_is_an_error_and_the_log_reopens_with_every_acknowledged_entry() {
    let Some(tiny) = TinyDisk::mount() else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let (dir, config) = (tiny.dir(), TinyDisk::CONFIG);
    let mut log = SegmentLog::open(&dir, config).expect("opens");
    let entry = vec![0x5au8; 3000];
    let mut acknowledged = 0u64;
    let error = loop {
        assert!(acknowledged < 100, "64 KiB cannot hold 100 entries of 3 KB");
        match log.append([(acknowledged + 1, entry.as_slice())]) {
            Ok(()) => acknowledged += 1,
            Err(error) => break error,
        }
    };
    match &error {
        SegmentLogError::Io {
            operation, source, ..
        } => {
            assert_eq!(*operation, "preallocating a segment");
            assert_eq!(source.raw_os_error(), Some(28), "ENOSPC: {source}");
        }
        other => panic!("expected ENOSPC, got {other:?}"),
    }
    assert!(acknowledged >= 10, "{acknowledged} entries fit");
    let refused = log.append([(acknowledged + 1, entry.as_slice())]);
    assert!(
        matches!(refused, Err(SegmentLogError::Poisoned { .. })),
        "{refused:?}"
    );
    drop(log);
    let log = SegmentLog::open(&dir, config).expect("reopens");
    assert_eq!(log.recovered(), None);
    assert_eq!(log.last_index(), Some(acknowledged));
    let entries = log.read(..).expect("reads");
    assert_eq!(entries.len() as u64, acknowledged);
    assert!(entries.iter().all(|(_, bytes)| *bytes == entry));
}

/// A follower that installs a snapshot past its log's end purges every entry and continues after
/// the snapshot. On a disk its segments fill, the new segment fits only once the old ones are
/// gone: the purge succeeds, and a reopen continues after the purged index.
#[test]
fn a_purge_past_the_end_succeeds_on_a_disk_the_old_segments_fill() {
    let Some(tiny) = TinyDisk::mount() else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let (dir, config) = (tiny.dir(), TinyDisk::CONFIG);
    let mut log = SegmentLog::open(&dir, config).expect("opens");
    let entry = vec![0x5au8; 3000];
    let mut last = 0u64;
    while log.append([(last + 1, entry.as_slice())]).is_ok() {
        last += 1;
        assert!(last < 100, "64 KiB cannot hold 100 entries of 3 KB");
    }
    // The full disk poisoned this handle; a reopen recovers every acknowledged entry.
    drop(log);
    let mut log = SegmentLog::open(&dir, config).expect("reopens");
    assert_eq!(log.last_index(), Some(last));
    let purged = last + 1_000;
    log.purge_upto(purged)
        .expect("the purge frees the room its new segment needs");
    assert_eq!(log.next_index(), Some(purged + 1));
    log.append([(purged + 1, entry.as_slice())])
        .expect("appends after the purge");
    drop(log);
    let log = SegmentLog::open(&dir, config).expect("reopens after the purge");
    assert_eq!(log.first_index(), Some(purged + 1));
    assert_eq!(log.last_index(), Some(purged + 1));
}
