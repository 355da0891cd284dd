//! The harnesses of this crate's providers.

use std::sync::Arc;

use super::Harness;
use crate::{LocalProvider, NamespaceProvider, SandboxProvider};

/// The `local` provider.
pub struct LocalHarness;

impl Harness for LocalHarness {
    fn provider(&self) -> Arc<dyn SandboxProvider> {
        Arc::new(LocalProvider::new())
    }
}

/// The `namespace` provider with `bwrap` from `PATH`. Tests using it fail (they do not skip)
/// when bubblewrap is missing or cannot create namespaces.
pub struct NamespaceHarness;

impl Harness for NamespaceHarness {
    fn provider(&self) -> Arc<dyn SandboxProvider> {
        Arc::new(NamespaceProvider::default())
    }
}
