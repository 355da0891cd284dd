//! The sandbox conformance suite on the `local` provider.
use gateway_sandbox::SandboxProvider;
use gateway_sandbox::conformance::harness::LocalHarness;

gateway_sandbox::conformance_suite!(LocalHarness);

#[test]
fn local_is_available_where_bash_is() {
    gateway_sandbox::LocalProvider::new().check().expect("bash is runnable");
}
