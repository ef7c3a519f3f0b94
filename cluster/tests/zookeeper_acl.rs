//! ZooKeeper ACLs on an authenticated cluster connection, against a real ZooKeeper server:
//! the nodes a session with digest credentials creates (group offsets and owners among them)
//! are changed only by sessions with the same credentials, and read by anyone.

use std::sync::Arc;

use cluster::{Claim, CoordError, Registry, RegistryError, ZooKeeper, ZooKeeperConfig};
use testkit::zookeeper::ZooKeeperServer;

async fn session(connect: &str, credentials: Option<&str>) -> Arc<ZooKeeper> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zookeeper.digest");
    if let Some(credentials) = credentials {
        std::fs::write(&file, format!("{credentials}\n")).unwrap();
    }
    let config = ZooKeeperConfig::new(connect)
        .with_digest_file(credentials.map(|_| file.as_path()))
        .unwrap();
    ZooKeeper::connect(config).await.expect("a ZooKeeper session")
}

fn refused(result: Result<(), RegistryError>) -> bool {
    matches!(result, Err(RegistryError::Coord(CoordError::NotAuthorized { .. })))
}

#[tokio::test]
async fn an_authenticated_clusters_offsets_and_owners_change_only_with_its_credentials() {
    // A nested chroot, as `/tributary/live-a`: its parent is the authenticated cluster's too,
    // and a reader without the credentials must still open a session under it.
    let connect = format!("{}/live-a", ZooKeeperServer::shared().connect_string());
    let cluster = Registry::new(session(&connect, Some("tributary:s3cret")).await);
    cluster.commit_offset("g", "page-view", 0, 42).await.unwrap();
    assert_eq!(cluster.claim("g", "page-view", 0, "c-1").await.unwrap(), Claim::Claimed);

    // Anyone reads: lag tools, the audit.
    let anonymous = Registry::new(session(&connect, None).await);
    assert_eq!(anonymous.offset("g", "page-view", 0).await.unwrap(), Some(42));
    assert_eq!(anonymous.owners("g", "page-view").await.unwrap()[&0], "c-1");
    // Nobody else writes: no credentials, or other ones.
    let stranger = Registry::new(session(&connect, Some("tributary:guess")).await);
    for outsider in [&anonymous, &stranger] {
        assert!(refused(outsider.commit_offset("g", "page-view", 0, 0).await));
        assert!(refused(outsider.commit_offset("g", "page-view", 1, 0).await), "a new partition");
        assert!(refused(outsider.delete_group("g").await));
        let claim = outsider.claim("g", "page-view", 1, "intruder").await.map(drop);
        assert!(refused(claim), "an owner node under the group's");
    }
    assert_eq!(cluster.offset("g", "page-view", 0).await.unwrap(), Some(42));
    // Another session with the cluster's credentials (a restarted mirror) does.
    let again = Registry::new(session(&connect, Some("tributary:s3cret")).await);
    again.commit_offset("g", "page-view", 0, 43).await.unwrap();
    again.commit_offset("g", "page-view", 1, 7).await.unwrap();
    assert_eq!(anonymous.offset("g", "page-view", 0).await.unwrap(), Some(43));
}

#[test]
fn bad_credentials_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("digest");
    for bad in ["", "nopassword", ":x", "user:"] {
        std::fs::write(&file, bad).unwrap();
        let error = ZooKeeperConfig::new("127.0.0.1:1").with_digest_file(Some(&file)).unwrap_err();
        assert!(error.to_string().contains("user:password"), "{bad:?}: {error}");
    }
    let missing = dir.path().join("missing");
    let error = ZooKeeperConfig::new("127.0.0.1:1").with_digest_file(Some(&missing)).unwrap_err();
    assert!(error.to_string().contains("cannot read"), "{error}");
    std::fs::write(&file, "tributary:s3cret\n").unwrap();
    let config = ZooKeeperConfig::new("127.0.0.1:1").with_digest_file(Some(&file)).unwrap();
    assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
}
