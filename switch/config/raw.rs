//! The rule file as serde reads it: every value keeps its span for error messages, and unknown
//! keys are refused (`deny_unknown_fields`), except beside `scheduler`, where module options go.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    #[serde(default)]
    pub switch: Option<Spanned<RawSwitch>>,
    #[serde(default)]
    pub admin: Option<Spanned<RawAdmin>>,
    #[serde(default, rename = "virtual")]
    pub services: BTreeMap<Spanned<String>, Spanned<RawService>>,
    #[serde(default, rename = "pool")]
    pub pools: BTreeMap<Spanned<String>, Spanned<RawPool>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSwitch {
    pub workers: Option<Spanned<i64>>,
    pub max_clients: Option<Spanned<i64>>,
    pub header_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub keepalive_timeout: Option<Spanned<String>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub shutdown_timeout: Option<Spanned<String>>,
    /// `true`, `false` or a file path.
    pub access_log: Option<Spanned<toml::Value>>,
    pub access_log_format: Option<Spanned<String>>,
    pub splice: Option<bool>,
    pub splice_threshold: Option<Spanned<toml::Value>>,
    pub connect_attempts: Option<Spanned<i64>>,
    pub server_idle_max: Option<Spanned<i64>>,
    pub server_idle_timeout: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    pub listen: Spanned<String>,
    pub token: Option<Spanned<String>>,
    pub token_file: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawService {
    pub listen: Spanned<String>,
    pub default_pool: Option<Spanned<String>>,
    pub defer_accept: Option<bool>,
    #[serde(default)]
    pub rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub method: Option<Spanned<String>>,
    pub header: Option<Spanned<RawHeaderCondition>>,
    pub pool: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHeaderCondition {
    pub name: Spanned<String>,
    pub value: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub addr: Spanned<String>,
    pub weight: Option<Spanned<i64>>,
    pub max_conns: Option<Spanned<i64>>,
    pub backup: Option<bool>,
}

/// `[pool.NAME.health]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealth {
    pub check: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub expect: Option<Spanned<String>>,
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub rise: Option<Spanned<i64>>,
    pub fall: Option<Spanned<i64>>,
    pub max_fails: Option<Spanned<i64>>,
    pub fail_timeout: Option<Spanned<String>>,
    pub agent_port: Option<Spanned<i64>>,
    pub agent_interval: Option<Spanned<String>>,
}

/// A pool table: `scheduler`, `servers`, the switch's own pool keys, and any other key as an
/// option of the module.
#[derive(Default)]
pub(crate) struct RawPool {
    pub scheduler: Option<Spanned<String>>,
    pub servers: Option<Spanned<Vec<Spanned<RawServer>>>>,
    pub queue_timeout: Option<Spanned<String>>,
    pub slow_start: Option<Spanned<String>>,
    pub health: Option<Spanned<RawHealth>>,
    pub options: Vec<(Spanned<String>, Spanned<toml::Value>)>,
}

impl<'de> Deserialize<'de> for RawPool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PoolVisitor;
        impl<'de> Visitor<'de> for PoolVisitor {
            type Value = RawPool;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a pool table with `scheduler` and `servers`")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPool, A::Error> {
                let mut pool = RawPool::default();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    match key.get_ref().as_str() {
                        "scheduler" => pool.scheduler = Some(map.next_value()?),
                        "servers" => pool.servers = Some(map.next_value()?),
                        "queue_timeout" => pool.queue_timeout = Some(map.next_value()?),
                        "slow_start" => pool.slow_start = Some(map.next_value()?),
                        "health" => pool.health = Some(map.next_value()?),
                        _ => {
                            let value = map.next_value()?;
                            pool.options.push((key, value));
                        }
                    }
                }
                Ok(pool)
            }
        }
        deserializer.deserialize_map(PoolVisitor)
    }
}
