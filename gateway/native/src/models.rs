//! The model clients the native loop routes its requests to, by the catalog's answer.

use std::collections::HashMap;
use std::sync::Arc;

use gateway_core::event::Usage;
use gateway_core::models::{ModelCatalog, ServedModel};
use gateway_models::ModelClient;

/// Every configured model's client, and the default's. Which one a request goes to, the id it
/// sends upstream, its context window and its prices are the catalog's to say
/// ([`ModelCatalog::serving`]); this only holds the clients the composition root built for
/// the catalog's names.
#[derive(Clone)]
pub struct Models {
    catalog: Arc<ModelCatalog>,
    clients: HashMap<String, Arc<dyn ModelClient>>,
    default: Arc<dyn ModelClient>,
}

impl Models {
    /// `clients` by the catalog's table names; `default` serves every id no table names (and
    /// a table without a client of its own, which the composition root never leaves).
    pub fn new(
        catalog: Arc<ModelCatalog>,
        clients: HashMap<String, Arc<dyn ModelClient>>,
        default: Arc<dyn ModelClient>,
    ) -> Self {
        Self { catalog, clients, default }
    }

    /// What serves the agent's model id `requested`, and its client.
    pub fn route(&self, requested: &str) -> (ServedModel, &Arc<dyn ModelClient>) {
        let served = self.catalog.serving(requested);
        let client = self.clients.get(&served.name).unwrap_or(&self.default);
        (served, client)
    }
}

/// One client for every id, sent upstream as asked and unpriced: what a process without
/// model tables (and most tests) has.
impl From<Arc<dyn ModelClient>> for Models {
    fn from(client: Arc<dyn ModelClient>) -> Self {
        Self::new(Arc::new(ModelCatalog::single("default")), HashMap::new(), client)
    }
}

impl<M: ModelClient + 'static> From<Arc<M>> for Models {
    fn from(client: Arc<M>) -> Self {
        Self::from(client as Arc<dyn ModelClient>)
    }
}

/// `usage` with its list cost at `served`'s prices, or counted as unpriced.
pub fn priced(served: &ServedModel, mut usage: Usage) -> Usage {
    match served.prices {
        Some(prices) => usage.list_cost_micros = prices.cost_micros(&usage),
        None => usage.unpriced_requests = 1,
    }
    usage
}
