//! Custom skills: versions keep their files and name; the latest moves with adds and deletes.

use gateway_core::{SkillId, SkillVersionId};

use super::Harness;
use crate::{Guard, NewSkillVersion, Order, PageRequest, SkillFile, StoreError};

fn version(name: &str, description: &str, script: &[u8]) -> NewSkillVersion {
    NewSkillVersion {
        id: SkillVersionId::new(),
        name: name.into(),
        description: description.into(),
        files: vec![
            SkillFile { path: "SKILL.md".into(), executable: false, bytes: b"---\nname: x\n---\n".to_vec() },
            SkillFile { path: "scripts/run.sh".into(), executable: true, bytes: script.to_vec() },
        ],
    }
}

pub async fn skill_versions_keep_their_files_and_the_latest_follows_changes(h: &dyn Harness) {
    let s = h.fresh().await;
    let id = SkillId::new();
    let v1 = version("greeter", "says hello", b"#!/bin/sh\necho one\n\xff");
    let (skill, first) = s.create_skill(&id, "Greeter", v1.clone()).await.unwrap();
    assert_eq!((skill.name.as_str(), skill.display_name.as_str()), ("greeter", "Greeter"));
    assert_eq!(skill.latest_version_id, v1.id);
    assert_eq!(s.get_skill_version(&id, "latest").await.unwrap(), first);
    assert_eq!(s.skill_files(&v1.id).await.unwrap(), v1.files, "bytes and exec bits as stored");

    let renamed = s.add_skill_version(&id, version("other", "x", b"")).await.unwrap_err();
    assert!(matches!(renamed, StoreError::Guard(Guard::SkillNameChanged { .. })), "{renamed:?}");
    let v2 = version("greeter", "says hello twice", b"#!/bin/sh\necho two\n");
    let second = s.add_skill_version(&id, v2.clone()).await.unwrap();
    assert_eq!(s.get_skill(&id).await.unwrap().latest_version_id, v2.id);
    assert_eq!(s.get_skill_version(&id, "latest").await.unwrap(), second);
    assert_eq!(s.get_skill_version(&id, v1.id.as_str()).await.unwrap(), first, "an old version stays readable");
    let listed = s.list_skill_versions(&id, &PageRequest::first(10, Order::Desc)).await.unwrap();
    assert_eq!(listed.items, vec![second.clone(), first.clone()]);

    s.delete_skill_version(&id, &v2.id).await.unwrap();
    assert_eq!(s.get_skill(&id).await.unwrap().latest_version_id, v1.id, "the latest falls back");
    assert!(s.skill_files(&v2.id).await.unwrap().is_empty());
    let last = s.delete_skill_version(&id, &v1.id).await.unwrap_err();
    assert!(matches!(last, StoreError::Guard(Guard::LastSkillVersion { .. })), "{last:?}");
    assert_eq!(s.get_skill_version(&id, "latest").await.unwrap(), first, "the refused delete changed nothing");

    let other = SkillId::new();
    s.create_skill(&other, "Other", version("other", "o", b"")).await.unwrap();
    let page = s.list_skills(&PageRequest::first(1, Order::Asc)).await.unwrap();
    assert_eq!(page.items[0].id, id);
    assert!(page.next.is_some());
    s.delete_skill(&id).await.unwrap();
    assert!(matches!(s.get_skill(&id).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(s.get_skill_version(&id, "latest").await, Err(StoreError::NotFound { .. })));
    assert!(s.skill_files(&v1.id).await.unwrap().is_empty());
    assert!(matches!(s.delete_skill(&id).await, Err(StoreError::NotFound { .. })));
}
