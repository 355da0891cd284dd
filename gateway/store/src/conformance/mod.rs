#![allow(clippy::unwrap_used)] // test support: a failed setup should abort the test loudly
//! The Store conformance suite: one set of behaviours, run on every engine.
//!
//! Each test takes a [`Harness`] that makes fresh, migrated, isolated stores. The engines'
//! test files instantiate every test with [`conformance_suite!`]; an engine is done when the
//! whole suite passes on it.

pub mod adapters;
pub mod admission;
pub mod catalog;
pub mod events;
pub mod feeds;
pub mod files;
pub mod harness;
pub mod runs;
pub mod sessions;
pub mod skills;
pub mod vaults;
pub mod work;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::agent::{AgentSpec, BackendRef, ModelSpec};
use gateway_core::content::ContentBlock;
use gateway_core::environment::{
    CloudConfig, EnvironmentConfig, EnvironmentSpec, Networking, Packages, ProviderTier, Provisioning,
};
use gateway_core::event::{EventPayload, NewEvent};
use gateway_core::placement::{LocalInputs, NetworkControl, Offer, ProviderOffer, place};
use gateway_core::run::WorkerOffer;
use gateway_core::session::{Session, SessionSnapshot};
use gateway_core::{EnvironmentId, Metadata, SessionId};

use crate::{AdmissionWrites, LeaseTerms, NewSession, Store, StoreOptions};

/// Makes stores for the suite.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A new, empty, migrated store that no other test sees.
    async fn fresh(&self) -> Arc<dyn Store>;
    /// Another handle (own pools, own listener) on the same database as `store`, as a second
    /// gateway process would have.
    async fn second(&self, store: &Arc<dyn Store>) -> Arc<dyn Store>;
    /// The options the harness opens stores with.
    fn options(&self) -> StoreOptions;
}

/// Instantiates every conformance test for a harness expression.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@each $harness;
            catalog::agents_are_versioned,
            catalog::concurrent_updates_from_one_base_have_one_winner,
            catalog::archived_agents_reject_updates,
            catalog::agent_lists_paginate_and_filter,
            catalog::environments_crud_and_delete_guard,
            catalog::api_keys_are_found_by_hash_until_revoked,
            sessions::creation_needs_a_live_environment,
            sessions::text_holding_nul_is_refused_alike_and_writes_nothing,
            sessions::initial_inputs_start_a_run,
            sessions::lists_filter_and_paginate_both_ways,
            sessions::updates_record_what_changed_and_redefining_waits_for_idle,
            sessions::archive_and_delete_are_refused_while_running,
            sessions::delete_ends_the_log_and_releases_the_environment,
            sessions::partial_answers_re_emit_idle_and_the_last_resumes,
            sessions::interrupt_cancels_queued_runs_and_flags_running_ones,
            sessions::opening_queues_one_run_without_inputs_that_a_message_joins,
            sessions::model_usage_adds_up_on_the_session_with_its_commits,
            sessions::a_budget_is_set_at_creation_raised_or_removed_never_added,
            events::seqs_increase_without_gap_under_concurrency,
            events::lists_filter_by_kind_and_time_and_page_by_seq,
            events::events_after_and_find_by_id,
            runs::claims_bump_the_epoch_and_hold_a_lease,
            runs::a_stale_worker_cannot_commit,
            runs::racing_workers_claim_exactly_once,
            runs::renewal_reports_cancel_and_fences,
            runs::release_requeues_without_a_crash,
            runs::reclaims_count_crashes_and_indeterminate_settles,
            runs::one_running_run_per_session,
            runs::settlements_set_session_status,
            runs::retry_waits_for_its_backoff,
            runs::claims_respect_backend_and_provider,
            runs::environment_pins_runs_to_its_host_until_the_host_is_gone,
            runs::a_lost_environment_is_released_only_by_request_and_only_once_its_host_is_gone,
            runs::released_environment_is_final,
            runs::parked_sessions_are_not_claimed,
            runs::environment_transitions_outside_runs_compare_and_set,
            runs::runs_record_the_inputs_they_answer,
            runs::messages_during_a_retry_backoff_get_their_own_run,
            runs::an_interrupt_outlives_a_retry_or_park_settlement,
            runs::commit_hints_wake_session_watchers,
            runs::hints_cross_store_handles,
            runs::an_admission_claims_its_own_run_with_its_turn_start,
            runs::batched_claims_take_one_run_per_session_and_start_their_turns,
            runs::leases_renew_together_and_lost_ones_are_reported,
            runs::a_host_id_is_refused_to_a_process_keeping_workspaces_elsewhere_while_its_holder_lives,
            adapters::bindings_commit_with_their_events_under_the_fence,
            adapters::snapshots_change_only_before_history,
            adapters::documents_are_versioned_and_listed_by_prefix,
            adapters::the_outbox_leases_retries_and_keeps_topic_order,
            adapters::outbox_batches_of_one_topic_stay_in_enqueue_order,
            admission::admission_writes_commit_with_their_inputs,
            admission::a_document_conflict_rolls_back_the_whole_admission,
            admission::a_refused_admission_writes_nothing,
            admission::resources_get_the_creation_time_of_the_database,
            admission::runs_keep_the_trace_context_of_their_admission,
            work::work_items_carry_a_sessions_connection,
            work::unanswered_requests_fail_and_lapsed_leases_disconnect,
            work::racing_polls_take_each_item_once,
            work::pollers_are_pruned_outside_their_window_and_bounded_per_environment,
            work::environment_keys_are_scoped_and_not_api_keys,
            work::fed_events_become_deliveries_once,
            feeds::subscribed_sessions_are_fed_to_each_subscribed_channel_once,
            feeds::a_settlement_is_all_or_nothing,
            feeds::an_ended_key_and_an_unsubscribed_session_are_fed_nothing,
            feeds::a_followed_session_is_fed_from_its_next_event,
            work::webhook_endpoints_disable_after_failures,
            work::webhook_endpoints_are_bounded_per_creating_key,
            files::files_keep_their_bytes_and_appear_only_once_created,
            files::a_mounted_file_outlives_every_attempt_to_delete_it,
            files::a_file_is_never_deleted_while_a_session_mounting_it_is_created,
            files::uploads_are_bounded_per_uploader_and_in_all,
            skills::skill_versions_keep_their_files_and_the_latest_follows_changes,
            vaults::vaults_and_credentials_archive_and_delete_together,
            vaults::a_vault_holds_one_live_credential_per_server,
            vaults::live_credentials_skip_what_is_archived_or_gone
        );
    };
    (@each $harness:expr; $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness = $harness;
                $crate::conformance::$module::$name(&harness).await;
            }
        )*
    };
}

// ---- fixtures shared by the tests ----

pub fn agent_spec(name: &str) -> AgentSpec {
    AgentSpec {
        name: name.to_owned(),
        description: None,
        system: Some("be brief".into()),
        model: ModelSpec { id: "claude-test".into(), effort: None, speed: None },
        tools: vec![],
        mcp_servers: vec![],
        skills: vec![],
        metadata: Metadata::new(),
        backend: BackendRef::Native,
        extensions: Default::default(),
    }
}

pub fn env_spec(name: &str) -> EnvironmentSpec {
    EnvironmentSpec {
        name: name.to_owned(),
        description: None,
        metadata: Metadata::new(),
        scope: None,
        config: EnvironmentConfig::Cloud(Box::new(CloudConfig {
            networking: Networking::Unrestricted,
            packages: Packages::default(),
            provisioning: Provisioning::OnToolUse,
            provider: ProviderTier::new("local"),
        })),
    }
}

pub fn placement_offer() -> Offer {
    Offer {
        providers: vec![ProviderOffer {
            tier: ProviderTier::new("local"),
            network: NetworkControl::None,
            installs_packages: false,
        }],
        ..Default::default()
    }
}

/// A new idle session on a fresh agent and environment.
pub async fn session(store: &Arc<dyn Store>) -> Session {
    session_with(store, vec![]).await
}

pub async fn session_with(store: &Arc<dyn Store>, initial: Vec<NewEvent>) -> Session {
    let agent = store.create_agent(agent_spec("a")).await.expect("create agent");
    let env = store.create_environment(env_spec("e")).await.expect("create environment");
    let requirements =
        place(&BackendRef::Native, &env.spec.config, &LocalInputs::default(), &placement_offer()).expect("place");
    let mut new = new_session(
        env.id,
        SessionSnapshot { agent, requirements, resources: vec![], vault_ids: vec![], client_tool_servers: vec![] },
        initial,
    );
    new.title = Some("t".into());
    store.create_session(new).await.expect("create session").0
}

/// A session request with a fresh id, no title or metadata and no adapter writes.
pub fn new_session(environment_id: EnvironmentId, snapshot: SessionSnapshot, initial: Vec<NewEvent>) -> NewSession {
    NewSession {
        id: SessionId::new(),
        environment_id,
        snapshot,
        title: None,
        metadata: Metadata::new(),
        budget: None,
        initial_inputs: initial,
        writes: AdmissionWrites::default(),
    }
}

pub fn msg(text: &str) -> NewEvent {
    NewEvent::new(EventPayload::UserMessage { content: vec![ContentBlock::text(text)] })
}

pub fn agent_text(text: &str) -> NewEvent {
    NewEvent::new(EventPayload::AgentMessage { content: vec![ContentBlock::text(text)] })
}

pub fn worker(name: &str, host: &str) -> WorkerOffer {
    WorkerOffer {
        worker: name.to_owned(),
        host: host.to_owned(),
        backends: vec![BackendRef::Native],
        providers: vec![ProviderTier::new("local")],
    }
}

pub fn terms(lease_ms: u64) -> LeaseTerms {
    LeaseTerms { lease: Duration::from_millis(lease_ms), host_ttl: Duration::from_secs(30) }
}

/// Long enough for any lease in these tests to expire on the database clock.
pub async fn outlive(lease_ms: u64) {
    tokio::time::sleep(Duration::from_millis(lease_ms + 150)).await;
}
