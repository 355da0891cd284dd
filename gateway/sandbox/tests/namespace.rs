//! The sandbox conformance and isolation suites on the `namespace` provider (bubblewrap).
//!
//! These tests fail, not skip, when bubblewrap is missing or user namespaces are off: the
//! provider is part of what CI must prove.
use gateway_sandbox::SandboxProvider;
use gateway_sandbox::conformance::harness::NamespaceHarness;

gateway_sandbox::conformance_suite!(NamespaceHarness);
gateway_sandbox::isolation_suite!(NamespaceHarness);

#[test]
fn bubblewrap_is_installed_and_works() {
    gateway_sandbox::NamespaceProvider::default()
        .check()
        .expect("bubblewrap must be installed and able to create user namespaces (apt-get install bubblewrap)");
}
