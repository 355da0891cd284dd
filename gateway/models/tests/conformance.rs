//! The ModelClient conformance suite on every implementation.

mod common;

mod fake {
    use gateway_models::fake::FakeModel;

    async fn setup() -> (FakeModel, ()) {
        (FakeModel::new(), ())
    }

    gateway_models::model_conformance_suite!(setup);
}

mod anthropic_over_stub {
    use gateway_models::anthropic::AnthropicClient;
    use gateway_models::stub::StubServer;

    async fn setup() -> (AnthropicClient, StubServer) {
        super::common::stub_client().await
    }

    gateway_models::model_conformance_suite!(setup);
}

mod openai_over_stub {
    use gateway_models::openai::OpenAiClient;
    use gateway_models::stub::StubServer;

    async fn setup() -> (OpenAiClient, StubServer) {
        super::common::openai_client().await
    }

    gateway_models::model_conformance_suite!(setup);
}
