//! Uploaded files mounted into sessions (docs/adr/0017): placed before execution depends on
//! them, whole or not at all, and named to the model where they really are.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::agent::PermissionPolicy;
use gateway_core::environment::Provisioning;
use gateway_core::event::{ErrorKind, EventPayload, StopReason};
use gateway_core::session::{EnvironmentState, ResourceKind};
use gateway_runtime::{RuntimeError, StoredFile};

use crate::common::stop_of;
use crate::harness::{Native, cloud, native, native_with, offer, tool_results, toolset};

async fn upload(n: &Native, content: &[u8]) -> StoredFile {
    let mut upload = n.coordinator.upload();
    // In uneven pieces, as a network delivers them.
    for piece in content.chunks(70_001) {
        upload.push(piece).await.unwrap();
    }
    upload.finish("f".into(), "application/octet-stream".into()).await.unwrap()
}

fn file(f: &StoredFile, mount_path: &str) -> ResourceKind {
    ResourceKind::File { file_id: f.id.to_string(), mount_path: mount_path.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mounted_files_are_placed_before_the_first_model_request_and_the_model_is_told_where() {
    let stub = gateway_models::stub::StubServer::start().await;
    let client = gateway_models::anthropic::AnthropicClient::new(gateway_models::anthropic::AnthropicConfig::new(
        stub.base_url(),
        gateway_models::anthropic::Credential::ApiKey("k".into()),
    ))
    .unwrap();
    let n = native_with(Arc::new(client), offer(&[]), Duration::from_secs(300)).await;
    let pool = n.workers(0);
    let text = upload(&n, b"hello mounted world\n").await;
    // Across a chunk boundary of the store, every byte value.
    let binary: Vec<u8> = (0..(1 << 20) + 4099).map(|i| (i * 31 % 256) as u8).collect();
    let blob = upload(&n, &binary).await;
    let blob_path = format!("/mnt/session/uploads/{}", blob.id);
    let s = n
        .session(
            toolset(PermissionPolicy::AlwaysAllow),
            // Deferred provisioning: the mounts alone force the realization.
            cloud(Provisioning::OnToolUse, "local"),
            vec![file(&text, "/workspace/data/notes.txt"), file(&blob, &blob_path)],
        )
        .await
        .unwrap();

    let talk = n.turn(&s, "just talk").await;
    assert_eq!(stop_of(talk.last().unwrap()), Some(StopReason::EndTurn));
    assert_eq!(n.state(&s).await, EnvironmentState::Realized, "realized although no tool ran");
    let workspace = n.workspaces.path().join(s.id.as_str());
    assert_eq!(std::fs::read(workspace.join("data/notes.txt")).unwrap(), b"hello mounted world\n");
    let placed = workspace.join("mnt/session/uploads").join(blob.id.as_str());
    assert_eq!(std::fs::read(&placed).unwrap(), binary);
    assert_eq!(std::fs::metadata(&placed).unwrap().permissions().mode() & 0o777, 0o444, "read-only");

    // The first model request already named both files: the local sandbox cannot show them
    // at their mount paths, so the real ones are given.
    let requests = stub.requests();
    let system =
        requests.iter().find(|r| r.path == "/v1/messages").expect("a model request").body["system"].to_string();
    assert!(system.contains("/workspace/data/notes.txt"), "{system}");
    assert!(system.contains(&workspace.join("data/notes.txt").display().to_string()), "{system}");
    assert!(system.contains(&placed.display().to_string()), "{system}");

    let read = n.turn(&s, r#"tool:read {"file_path": "data/notes.txt"}"#).await;
    let (out, is_error) = tool_results(&read).remove(0);
    assert!(!is_error && out.contains("hello mounted world"), "{out}");
    // The session-mount view resolves for the file tools on every provider.
    let read = n.turn(&s, &format!(r#"tool:read {{"file_path": "{blob_path}"}}"#)).await;
    let (out, _) = tool_results(&read).remove(0);
    assert!(out.contains("binary"), "the blob is found (and refused as binary): {out}");

    // A file added between turns is there before the next one.
    let later = upload(&n, b"added later").await;
    n.coordinator.add_resource(&s.id, file(&later, "/workspace/later.txt")).await.unwrap();
    let read = n.turn(&s, r#"tool:read {"file_path": "later.txt"}"#).await;
    assert!(tool_results(&read)[0].0.contains("added later"), "{:?}", tool_results(&read));
    pool.shutdown().await;
    stub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_that_cannot_be_placed_fails_the_turn_naming_it_and_leaves_nothing_behind() {
    let n = native().await;
    let pool = n.workers(0);
    let s = n
        .session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![])
        .await
        .unwrap();
    // The agent makes `data` a file; a mount below it cannot be placed.
    n.turn(&s, r#"tool:write {"file_path": "data", "content": "in the way"}"#).await;
    let f = upload(&n, b"never placed").await;
    let (_, rid) = n.coordinator.add_resource(&s.id, file(&f, "/workspace/data/x.txt")).await.unwrap();
    let es = n.turn(&s, "hello").await;
    let (kind, message) = es
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::SessionError { kind, message, .. } => Some((*kind, message.clone())),
            _ => None,
        })
        .expect("a typed error event");
    assert_eq!(kind, ErrorKind::MountFailed);
    assert!(message.contains(rid.as_str()) && message.contains("/workspace/data/x.txt"), "{message}");
    assert!(!es.iter().any(|e| matches!(e.payload, EventPayload::ModelRequestStarted {})), "the model was not asked");
    let workspace = n.workspaces.path().join(s.id.as_str());
    assert_eq!(std::fs::read(workspace.join("data")).unwrap(), b"in the way");
    let left: Vec<_> = std::fs::read_dir(&workspace).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("data")], "no partial file");

    // Removing the resource lets the session go on.
    n.coordinator.remove_resource(&s.id, &rid).await.unwrap();
    let es = n.turn(&s, "hello again").await;
    assert_eq!(stop_of(es.last().unwrap()), Some(StopReason::EndTurn));
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mount_paths_are_checked_when_the_session_is_created() {
    let n = native().await;
    let f = upload(&n, b"x").await;
    for bad in [
        vec![file(&f, "/etc/passwd")],
        vec![file(&f, "/workspace/../etc/passwd")],
        vec![file(&f, "/workspace/a"), file(&f, "/workspace/a")],
        vec![file(&f, "/workspace/a"), file(&f, "/workspace/a/b")],
    ] {
        let refused =
            n.session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), bad).await;
        assert!(matches!(refused, Err(RuntimeError::Invalid(_))), "{refused:?}");
    }
    let missing =
        ResourceKind::File { file_id: gateway_core::FileId::new().to_string(), mount_path: "/workspace/m".into() };
    let refused =
        n.session(toolset(PermissionPolicy::AlwaysAllow), cloud(Provisioning::OnToolUse, "local"), vec![missing]).await;
    assert!(matches!(refused, Err(RuntimeError::NotFound { kind: "file", .. })), "{refused:?}");
}
