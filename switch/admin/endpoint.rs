//! What the admin routes read and write: the switch's shared state, the token that guards
//! changes, the rate samples.

use super::rates::Sampler;
use crate::shared::Shared;
use std::sync::Arc;

#[derive(Debug)]
pub struct Endpoint {
    pub shared: Arc<Shared>,
    /// `Authorization: Bearer <token>` needed for changes; `None`: loopback rules apply.
    pub token: Option<String>,
    pub sampler: Sampler,
}

impl Endpoint {
    pub fn new(shared: Arc<Shared>, token: Option<String>) -> Endpoint {
        Endpoint {
            shared,
            token,
            sampler: Sampler::default(),
        }
    }
}
