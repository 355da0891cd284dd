//! Requirements and placement (DESIGN §2): computed once, when a session is created, by one
//! pure function. The result is frozen into the session; later edits to the agent or the
//! environment never change a live session's requirements.
//!
//! The function never picks a "close enough" alternative: a combination it cannot honour is
//! an error naming the rule, so no session silently runs on a weaker sandbox or another backend.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::agent::BackendRef;
use crate::environment::{EnvironmentConfig, Networking, ProviderTier, Provisioning};

/// What a session brings that lives on the local machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalInputs {
    pub files: usize,
    pub repositories: usize,
    /// A client workspace mounted as the session's working directory (e.g. an ACP `cwd`).
    pub workspace: bool,
    pub executable_skills: bool,
}

impl LocalInputs {
    pub fn any(&self) -> bool {
        self.files > 0 || self.repositories > 0 || self.workspace || self.executable_skills
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.files > 0 {
            parts.push(format!("{} file mount(s)", self.files));
        }
        if self.repositories > 0 {
            parts.push(format!("{} repository mount(s)", self.repositories));
        }
        if self.workspace {
            parts.push("a mounted workspace".to_owned());
        }
        if self.executable_skills {
            parts.push("executable skills".to_owned());
        }
        parts.join(", ")
    }
}

/// How far a provider can restrict a sandbox's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkControl {
    /// Cannot restrict anything (the `local` provider).
    None,
    /// Either full network or none at all (the `namespace` provider).
    AllOrNothing,
    /// Can restrict to a host allowlist.
    HostAllowlist,
}

/// One sandbox provider this deployment offers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProviderOffer {
    pub tier: ProviderTier,
    pub network: NetworkControl,
    pub installs_packages: bool,
}

/// What this deployment can serve, as far as placement is concerned.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    pub providers: Vec<ProviderOffer>,
    pub acp_executors: BTreeSet<String>,
    pub a2a_remotes: BTreeSet<String>,
    /// Gateway-internal agents (`builtin:<name>`) this deployment runs.
    pub builtins: BTreeSet<String>,
    /// Whether repository resources can be checked out into a workspace. No component of
    /// this gateway does that yet, so deployments offer `false` and such sessions are refused
    /// rather than started without the repositories they asked for. (Uploaded files are always
    /// materializable: their content is in the store.)
    pub repositories: bool,
}

impl Offer {
    fn provider(&self, tier: &ProviderTier) -> Option<&ProviderOffer> {
        self.providers.iter().find(|p| &p.tier == tier)
    }
}

/// The sandbox a session's environment must be realized with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub provider: ProviderTier,
    /// Whether the sandbox may use the network at all.
    pub network: bool,
}

/// Why an environment must exist before execution starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RealizeReason {
    EagerProvisioning,
    Mounts,
    Workspace,
    ExecutableSkills,
    AcpProcess,
}

/// When (if ever) the session's local environment is realized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "when", rename_all = "snake_case")]
pub enum EnvironmentPlan {
    /// No local environment is ever created (a remote A2A agent, or a self-hosted executor).
    Never,
    /// Start without a sandbox; realize it right before the first local tool executes.
    OnFirstLocalTool { sandbox: SandboxSpec },
    /// Realize before execution, because something the session runs depends on it.
    BeforeExecution { sandbox: SandboxSpec, because: Vec<RealizeReason> },
}

impl EnvironmentPlan {
    /// The sandbox the session would use, if any.
    pub fn sandbox(&self) -> Option<&SandboxSpec> {
        match self {
            EnvironmentPlan::Never => None,
            EnvironmentPlan::OnFirstLocalTool { sandbox } | EnvironmentPlan::BeforeExecution { sandbox, .. } => {
                Some(sandbox)
            }
        }
    }

    /// Whether the environment must be realized before the backend runs at all.
    pub fn realize_before_execution(&self) -> bool {
        matches!(self, EnvironmentPlan::BeforeExecution { .. })
    }
}

/// Who executes built-in tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolExecution {
    /// The session's Hand, inside the session environment.
    Local,
    /// An external (self-hosted) executor answers them with tool results.
    External,
}

/// A session's frozen requirements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    pub backend: BackendRef,
    pub environment: EnvironmentPlan,
    pub tool_execution: ToolExecution,
}

impl Requirements {
    /// The provider a Worker must offer to claim this session's runs.
    pub fn provider(&self) -> Option<&ProviderTier> {
        self.environment.sandbox().map(|s| &s.provider)
    }
}

/// A combination placement cannot honour. Each message names the rule that decided it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error(
        "placement rule \"ACP + on_tool_use\": ACP agent {executor:?} runs inside the session environment, which must exist before the process starts, but the environment defers provisioning (sandbox_provisioning \"on_tool_use\"); use an environment with sandbox_provisioning \"eager\""
    )]
    AcpDeferredProvisioning { executor: String },
    #[error(
        "placement rule \"A2A + local inputs\": remote A2A agent {remote:?} cannot use local inputs ({inputs}); a session on a remote agent never gets a local environment"
    )]
    A2aWithLocalInputs { remote: String, inputs: String },
    #[error(
        "placement rule \"A2A + eager\": remote A2A agent {remote:?} never gets a local environment, but the environment asks for eager provisioning; use an environment with sandbox_provisioning \"on_tool_use\""
    )]
    A2aWithEagerProvisioning { remote: String },
    #[error(
        "placement rule \"ACP + self_hosted\": ACP agent {executor:?} runs inside a local session environment, which a self_hosted environment never provides"
    )]
    AcpOnSelfHosted { executor: String },
    #[error("placement rule \"self_hosted + local inputs\": a self_hosted environment takes no resources ({inputs})")]
    LocalInputsOnSelfHosted { inputs: String },
    #[error(
        "placement rule \"unmet requirements\": sandbox provider {provider:?} is not available on this gateway (available: {available})"
    )]
    ProviderUnavailable { provider: String, available: String },
    #[error(
        "placement rule \"unmet requirements\": sandbox provider {provider:?} cannot enforce the environment's network policy ({detail})"
    )]
    NetworkPolicyUnsupported { provider: String, detail: String },
    #[error(
        "placement rule \"unmet requirements\": sandbox provider {provider:?} cannot install packages, but the environment lists some"
    )]
    PackagesUnsupported { provider: String },
    #[error("placement rule \"unmet requirements\": no ACP executor named {0:?} is configured")]
    UnknownExecutor(String),
    #[error("placement rule \"unmet requirements\": no A2A remote named {0:?} is configured")]
    UnknownRemote(String),
    #[error("placement rule \"unmet requirements\": no built-in agent named {0:?} is enabled")]
    UnknownBuiltin(String),
    #[error("placement rule \"builtin + local inputs\": a built-in agent takes no local inputs ({inputs})")]
    LocalInputsOnBuiltin { inputs: String },
    #[error(
        "placement rule \"unmet requirements\": this gateway cannot mount repository resources ({inputs}); it does not check out repositories yet"
    )]
    MountsUnsupported { inputs: String },
}

impl PlacementError {
    /// A stable code for clients to branch on.
    pub fn code(&self) -> &'static str {
        match self {
            PlacementError::AcpDeferredProvisioning { .. } => "acp_requires_eager_provisioning",
            PlacementError::A2aWithLocalInputs { .. } => "a2a_with_local_inputs",
            PlacementError::A2aWithEagerProvisioning { .. } => "a2a_with_eager_provisioning",
            PlacementError::AcpOnSelfHosted { .. } => "acp_on_self_hosted",
            PlacementError::LocalInputsOnSelfHosted { .. } => "resources_on_self_hosted",
            PlacementError::ProviderUnavailable { .. } => "provider_unavailable",
            PlacementError::NetworkPolicyUnsupported { .. } => "network_policy_unsupported",
            PlacementError::PackagesUnsupported { .. } => "packages_unsupported",
            PlacementError::UnknownExecutor(_) => "unknown_executor",
            PlacementError::UnknownRemote(_) => "unknown_remote",
            PlacementError::UnknownBuiltin(_) => "unknown_builtin",
            PlacementError::LocalInputsOnBuiltin { .. } => "builtin_with_local_inputs",
            // The client asked for a feature this deployment lacks, as the protocols' own
            // "not supported" answers say.
            PlacementError::MountsUnsupported { .. } => "not_supported",
        }
    }
}

/// Decides a session's requirements. One row of the DESIGN §2 table per branch; the tests
/// below name the rows.
pub fn place(
    backend: &BackendRef,
    environment: &EnvironmentConfig,
    inputs: &LocalInputs,
    offer: &Offer,
) -> Result<Requirements, PlacementError> {
    match backend {
        BackendRef::Acp { executor } if !offer.acp_executors.contains(executor) => {
            return Err(PlacementError::UnknownExecutor(executor.clone()));
        }
        BackendRef::A2a { remote } if !offer.a2a_remotes.contains(remote) => {
            return Err(PlacementError::UnknownRemote(remote.clone()));
        }
        BackendRef::Builtin { name } if !offer.builtins.contains(name) => {
            return Err(PlacementError::UnknownBuiltin(name.clone()));
        }
        BackendRef::Builtin { .. } => {
            if inputs.any() {
                return Err(PlacementError::LocalInputsOnBuiltin { inputs: inputs.describe() });
            }
            return Ok(Requirements {
                backend: backend.clone(),
                environment: EnvironmentPlan::Never,
                tool_execution: ToolExecution::Local,
            });
        }
        _ => {}
    }

    let cloud = match environment {
        EnvironmentConfig::SelfHosted => {
            if let BackendRef::Acp { executor } = backend {
                return Err(PlacementError::AcpOnSelfHosted { executor: executor.clone() });
            }
            if inputs.any() {
                return Err(PlacementError::LocalInputsOnSelfHosted { inputs: inputs.describe() });
            }
            let tool_execution = if backend.is_native() { ToolExecution::External } else { ToolExecution::Local };
            return Ok(Requirements { backend: backend.clone(), environment: EnvironmentPlan::Never, tool_execution });
        }
        EnvironmentConfig::Cloud(cloud) => cloud,
    };

    // Outbound A2A: the remote does the work; nothing local may be needed.
    if let BackendRef::A2a { remote } = backend {
        if inputs.any() {
            return Err(PlacementError::A2aWithLocalInputs { remote: remote.clone(), inputs: inputs.describe() });
        }
        if cloud.provisioning == Provisioning::Eager {
            return Err(PlacementError::A2aWithEagerProvisioning { remote: remote.clone() });
        }
        return Ok(Requirements {
            backend: backend.clone(),
            environment: EnvironmentPlan::Never,
            tool_execution: ToolExecution::Local,
        });
    }

    let mut because = Vec::new();
    if let BackendRef::Acp { executor } = backend {
        if cloud.provisioning == Provisioning::OnToolUse {
            return Err(PlacementError::AcpDeferredProvisioning { executor: executor.clone() });
        }
        because.push(RealizeReason::AcpProcess);
    }
    if cloud.provisioning == Provisioning::Eager {
        because.push(RealizeReason::EagerProvisioning);
    }
    if inputs.repositories > 0 && !offer.repositories {
        let only = LocalInputs { repositories: inputs.repositories, ..Default::default() };
        return Err(PlacementError::MountsUnsupported { inputs: only.describe() });
    }
    if inputs.files > 0 || inputs.repositories > 0 {
        because.push(RealizeReason::Mounts);
    }
    if inputs.workspace {
        because.push(RealizeReason::Workspace);
    }
    if inputs.executable_skills {
        because.push(RealizeReason::ExecutableSkills);
    }

    let sandbox = sandbox_for(cloud.provider.clone(), &cloud.networking, !cloud.packages.is_empty(), offer)?;
    let environment = if because.is_empty() {
        EnvironmentPlan::OnFirstLocalTool { sandbox }
    } else {
        EnvironmentPlan::BeforeExecution { sandbox, because }
    };
    Ok(Requirements { backend: backend.clone(), environment, tool_execution: ToolExecution::Local })
}

/// Checks that the requested provider exists and can honour the network and package policy.
fn sandbox_for(
    provider: ProviderTier,
    networking: &Networking,
    wants_packages: bool,
    offer: &Offer,
) -> Result<SandboxSpec, PlacementError> {
    let Some(p) = offer.provider(&provider) else {
        let available = offer.providers.iter().map(|p| p.tier.to_string()).collect::<Vec<_>>().join(", ");
        return Err(PlacementError::ProviderUnavailable {
            provider: provider.to_string(),
            available: if available.is_empty() { "none".into() } else { available },
        });
    };
    let network = networking.any_network();
    let needed = match networking {
        Networking::Unrestricted => NetworkControl::None,
        Networking::Limited { allowed_hosts, allow_mcp_servers, allow_package_managers } => {
            if allowed_hosts.is_empty() && !allow_mcp_servers && !allow_package_managers {
                NetworkControl::AllOrNothing
            } else {
                NetworkControl::HostAllowlist
            }
        }
    };
    if p.network < needed {
        let detail = match needed {
            NetworkControl::AllOrNothing => "it cannot cut a sandbox off the network",
            _ => "it cannot restrict a sandbox to a host allowlist",
        };
        return Err(PlacementError::NetworkPolicyUnsupported {
            provider: provider.to_string(),
            detail: detail.to_owned(),
        });
    }
    if wants_packages && !p.installs_packages {
        return Err(PlacementError::PackagesUnsupported { provider: provider.to_string() });
    }
    Ok(SandboxSpec { provider, network })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::{CloudConfig, Packages};

    fn offer() -> Offer {
        Offer {
            providers: vec![
                ProviderOffer {
                    tier: ProviderTier::new("local"),
                    network: NetworkControl::None,
                    installs_packages: false,
                },
                ProviderOffer {
                    tier: ProviderTier::new("namespace"),
                    network: NetworkControl::AllOrNothing,
                    installs_packages: false,
                },
            ],
            acp_executors: ["claude".to_owned()].into(),
            a2a_remotes: ["echo".to_owned()].into(),
            builtins: ["conformance".to_owned()].into(),
            repositories: true,
        }
    }

    fn cloud(provisioning: Provisioning, provider: &str) -> EnvironmentConfig {
        EnvironmentConfig::Cloud(Box::new(CloudConfig {
            networking: Networking::Unrestricted,
            packages: Packages::default(),
            provisioning,
            provider: ProviderTier(provider.into()),
        }))
    }

    fn acp() -> BackendRef {
        BackendRef::Acp { executor: "claude".into() }
    }

    fn a2a() -> BackendRef {
        BackendRef::A2a { remote: "echo".into() }
    }

    fn mounts() -> LocalInputs {
        LocalInputs { files: 1, ..Default::default() }
    }

    fn repositories() -> LocalInputs {
        LocalInputs { repositories: 1, ..Default::default() }
    }

    // Row: native, no local input or tool, on_tool_use -> start without a sandbox.
    #[test]
    fn row_native_without_local_input_starts_without_sandbox() {
        let r = place(&BackendRef::Native, &cloud(Provisioning::OnToolUse, "local"), &LocalInputs::default(), &offer())
            .unwrap();
        assert!(!r.environment.realize_before_execution());
        assert!(matches!(r.environment, EnvironmentPlan::OnFirstLocalTool { .. }));
    }

    // Row: native that reaches a local tool -> realize before the first local tool executes,
    // with the environment's own provider.
    #[test]
    fn row_native_local_tool_realizes_with_the_requested_provider() {
        let r =
            place(&BackendRef::Native, &cloud(Provisioning::OnToolUse, "namespace"), &LocalInputs::default(), &offer())
                .unwrap();
        assert_eq!(
            r.environment,
            EnvironmentPlan::OnFirstLocalTool {
                sandbox: SandboxSpec { provider: ProviderTier::new("namespace"), network: true }
            }
        );
        assert_eq!(r.tool_execution, ToolExecution::Local);
        assert_eq!(r.provider(), Some(&ProviderTier::new("namespace")));
    }

    // Row: mounts / workspace / executable skills / eager -> realize before execution.
    #[test]
    fn row_mounts_workspace_skills_or_eager_realize_before_execution() {
        let cases = [
            (Provisioning::Eager, LocalInputs::default(), RealizeReason::EagerProvisioning),
            (Provisioning::OnToolUse, mounts(), RealizeReason::Mounts),
            (Provisioning::OnToolUse, LocalInputs { repositories: 2, ..Default::default() }, RealizeReason::Mounts),
            (Provisioning::OnToolUse, LocalInputs { workspace: true, ..Default::default() }, RealizeReason::Workspace),
            (
                Provisioning::OnToolUse,
                LocalInputs { executable_skills: true, ..Default::default() },
                RealizeReason::ExecutableSkills,
            ),
        ];
        for (provisioning, inputs, reason) in cases {
            let r = place(&BackendRef::Native, &cloud(provisioning, "local"), &inputs, &offer()).unwrap();
            match r.environment {
                EnvironmentPlan::BeforeExecution { because, .. } => {
                    assert_eq!(because, vec![reason])
                }
                other => {
                    panic!("{inputs:?}/{provisioning:?}: expected BeforeExecution, got {other:?}")
                }
            }
        }
    }

    // Row: ACP process -> realize before the process starts; on_tool_use is rejected.
    #[test]
    fn row_acp_realizes_before_the_process_starts() {
        let r = place(&acp(), &cloud(Provisioning::Eager, "local"), &LocalInputs::default(), &offer()).unwrap();
        match r.environment {
            EnvironmentPlan::BeforeExecution { because, .. } => {
                assert!(because.contains(&RealizeReason::AcpProcess))
            }
            other => panic!("expected BeforeExecution, got {other:?}"),
        }
    }

    #[test]
    fn row_acp_with_on_tool_use_is_rejected_naming_the_rule() {
        let err =
            place(&acp(), &cloud(Provisioning::OnToolUse, "local"), &LocalInputs::default(), &offer()).unwrap_err();
        assert_eq!(err, PlacementError::AcpDeferredProvisioning { executor: "claude".into() });
        assert!(err.to_string().contains("ACP + on_tool_use"), "{err}");
        assert_eq!(err.code(), "acp_requires_eager_provisioning");
    }

    // Row: outbound A2A with no local dependency -> no environment, ever.
    #[test]
    fn row_a2a_without_local_dependency_never_creates_an_environment() {
        let r = place(&a2a(), &cloud(Provisioning::OnToolUse, "local"), &LocalInputs::default(), &offer()).unwrap();
        assert_eq!(r.environment, EnvironmentPlan::Never);
        assert_eq!(r.provider(), None);
    }

    // Row: outbound A2A that also needs local inputs -> rejected at creation.
    #[test]
    fn row_a2a_with_local_inputs_is_rejected_naming_the_rule() {
        let err = place(&a2a(), &cloud(Provisioning::OnToolUse, "local"), &mounts(), &offer()).unwrap_err();
        assert!(matches!(err, PlacementError::A2aWithLocalInputs { .. }));
        assert!(err.to_string().contains("A2A + local inputs"), "{err}");
        assert!(err.to_string().contains("1 file mount"), "{err}");
        let err = place(&a2a(), &cloud(Provisioning::Eager, "local"), &LocalInputs::default(), &offer()).unwrap_err();
        assert!(matches!(err, PlacementError::A2aWithEagerProvisioning { .. }), "{err}");
        // The backend's own rule wins over a missing checkout capability: the client learns
        // that the combination is impossible, not merely unsupported here.
        let no_checkouts = Offer { repositories: false, ..offer() };
        let err = place(&a2a(), &cloud(Provisioning::OnToolUse, "local"), &repositories(), &no_checkouts).unwrap_err();
        assert_eq!(err.code(), "a2a_with_local_inputs");
    }

    // Row: repositories on a deployment that cannot check them out -> refused, never started
    // without them; files (whose content is in the store) always realize before execution.
    #[test]
    fn row_repositories_without_a_checkout_are_refused_and_files_are_not() {
        let no_checkouts = Offer { repositories: false, ..offer() };
        for backend in [BackendRef::Native, acp()] {
            let env = cloud(Provisioning::Eager, "local");
            let err = place(&backend, &env, &repositories(), &no_checkouts).unwrap_err();
            assert!(matches!(err, PlacementError::MountsUnsupported { .. }), "{err}");
            assert!(err.to_string().contains("1 repository mount"), "{err}");
            let r = place(&backend, &env, &mounts(), &no_checkouts).unwrap();
            assert!(r.environment.realize_before_execution());
        }
        let workspace = LocalInputs { workspace: true, ..Default::default() };
        place(&acp(), &cloud(Provisioning::Eager, "local"), &workspace, &no_checkouts).unwrap();
    }

    // Row: requirements that cannot be met -> fail closed, never a weaker sandbox.
    #[test]
    fn row_unmet_requirements_fail_closed() {
        let err = place(
            &BackendRef::Native,
            &cloud(Provisioning::OnToolUse, "firecracker"),
            &LocalInputs::default(),
            &offer(),
        )
        .unwrap_err();
        assert_eq!(err.code(), "provider_unavailable");
        assert!(err.to_string().contains("available: local, namespace"), "{err}");

        let no_net = EnvironmentConfig::Cloud(Box::new(CloudConfig {
            networking: Networking::Limited {
                allowed_hosts: vec![],
                allow_mcp_servers: false,
                allow_package_managers: false,
            },
            packages: Packages::default(),
            provisioning: Provisioning::OnToolUse,
            provider: ProviderTier::new("local"),
        }));
        let err = place(&BackendRef::Native, &no_net, &LocalInputs::default(), &offer()).unwrap_err();
        assert_eq!(err.code(), "network_policy_unsupported", "local cannot cut the network");

        let mut on_ns = no_net.clone();
        if let EnvironmentConfig::Cloud(c) = &mut on_ns {
            c.provider = ProviderTier::new("namespace");
        }
        let r = place(&BackendRef::Native, &on_ns, &LocalInputs::default(), &offer()).unwrap();
        assert_eq!(r.environment.sandbox().map(|s| s.network), Some(false));

        if let EnvironmentConfig::Cloud(c) = &mut on_ns {
            c.networking = Networking::Limited {
                allowed_hosts: vec!["pypi.org".into()],
                allow_mcp_servers: false,
                allow_package_managers: false,
            };
        }
        let err = place(&BackendRef::Native, &on_ns, &LocalInputs::default(), &offer()).unwrap_err();
        assert_eq!(err.code(), "network_policy_unsupported", "namespace has no host allowlist");

        let err = place(
            &BackendRef::Acp { executor: "nope".into() },
            &cloud(Provisioning::Eager, "local"),
            &LocalInputs::default(),
            &offer(),
        )
        .unwrap_err();
        assert_eq!(err, PlacementError::UnknownExecutor("nope".into()));
        let err = place(
            &BackendRef::A2a { remote: "nope".into() },
            &cloud(Provisioning::OnToolUse, "local"),
            &LocalInputs::default(),
            &offer(),
        )
        .unwrap_err();
        assert_eq!(err, PlacementError::UnknownRemote("nope".into()));
    }

    #[test]
    fn builtin_agents_never_get_an_environment_and_take_no_local_inputs() {
        let b = BackendRef::Builtin { name: "conformance".into() };
        let r = place(&b, &cloud(Provisioning::Eager, "local"), &LocalInputs::default(), &offer()).unwrap();
        assert_eq!(r.environment, EnvironmentPlan::Never);
        assert_eq!(
            place(&b, &cloud(Provisioning::OnToolUse, "local"), &mounts(), &offer()).unwrap_err().code(),
            "builtin_with_local_inputs"
        );
        let unknown = BackendRef::Builtin { name: "nope".into() };
        assert_eq!(
            place(&unknown, &cloud(Provisioning::OnToolUse, "local"), &LocalInputs::default(), &offer())
                .unwrap_err()
                .code(),
            "unknown_builtin"
        );
    }

    #[test]
    fn self_hosted_runs_tools_externally_and_takes_no_local_inputs() {
        let r = place(&BackendRef::Native, &EnvironmentConfig::SelfHosted, &LocalInputs::default(), &offer()).unwrap();
        assert_eq!(r.environment, EnvironmentPlan::Never);
        assert_eq!(r.tool_execution, ToolExecution::External);
        assert_eq!(
            place(&acp(), &EnvironmentConfig::SelfHosted, &LocalInputs::default(), &offer()).unwrap_err().code(),
            "acp_on_self_hosted"
        );
        assert_eq!(
            place(&BackendRef::Native, &EnvironmentConfig::SelfHosted, &mounts(), &offer()).unwrap_err().code(),
            "resources_on_self_hosted"
        );
    }

    /// Each kind of local input, one row each: a file, a repository, a client workspace,
    /// executable skills.
    fn each_input_kind() -> [(&'static str, LocalInputs); 4] {
        [
            ("1 file mount", mounts()),
            ("1 repository mount", repositories()),
            ("a mounted workspace", LocalInputs { workspace: true, ..Default::default() }),
            ("executable skills", LocalInputs { executable_skills: true, ..Default::default() }),
        ]
    }

    // Rows per input kind: realized before execution on a local backend; refused, naming the
    // input, where no local environment can exist (remote A2A, self-hosted, built-in).
    #[test]
    fn every_input_kind_realizes_before_execution_or_is_refused_naming_it() {
        for (named, inputs) in each_input_kind() {
            let env = cloud(Provisioning::OnToolUse, "local");
            let r = place(&BackendRef::Native, &env, &inputs, &offer()).unwrap();
            assert!(r.environment.realize_before_execution(), "{named}");
            for (backend, env, code) in [
                (a2a(), cloud(Provisioning::OnToolUse, "local"), "a2a_with_local_inputs"),
                (BackendRef::Native, EnvironmentConfig::SelfHosted, "resources_on_self_hosted"),
                (
                    BackendRef::Builtin { name: "conformance".into() },
                    cloud(Provisioning::OnToolUse, "local"),
                    "builtin_with_local_inputs",
                ),
            ] {
                let err = place(&backend, &env, &inputs, &offer()).unwrap_err();
                assert_eq!(err.code(), code, "{named}: {err}");
                assert!(err.to_string().contains(named), "{named}: {err}");
            }
        }
    }
}
