//! What the admin routes read and write: the switch's shared state, the token that guards
//! changes, the rate samples and the generation shown.

use super::rates::Sampler;
use crate::shared::Shared;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct Endpoint {
    pub shared: Arc<Shared>,
    /// `Authorization: Bearer <token>` needed for changes; `None`: loopback rules apply.
    pub token: Option<String>,
    pub sampler: Sampler,
    /// The configuration generation shown (reloads count up from 1).
    generation: AtomicU64,
}

impl Endpoint {
    pub fn new(shared: Arc<Shared>, token: Option<String>) -> Endpoint {
        Endpoint {
            shared,
            token,
            sampler: Sampler::default(),
            generation: AtomicU64::new(1),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}
