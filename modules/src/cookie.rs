//! `cookie`: persistence by cookie, like KTCPVS `chttp` and HAProxy `cookie ... insert`.
//!
//! A client without the cookie is placed by an inner module (`inner`, default `wlc`) and its
//! first response gets `Set-Cookie: <name>=<server id>; Path=/; HttpOnly`. Later requests
//! carrying the cookie go to that server while it is up and its weight is above 0, draining or
//! not (a drained server keeps its persistent clients); otherwise the inner module places them
//! again and the cookie is re-issued.
//!
//! The server id is a keyed hash (SipHash-2-4) of the server's address, so the cookie does not
//! reveal the address. The key comes from the `secret` option; without one a random key is
//! drawn at start, and cookies stay valid only for the life of the process. Set a `secret` so
//! they survive restarts and agree between several tcpvs instances.

use crate::key::{cookie_value, is_token};
use crate::options::Options;
use crate::{
    BuildContext, BuildError, OptionValue, PoolView, RequestView, ResponseField, Scheduler,
};
use siphasher::sip::SipHasher24;
use std::hash::{BuildHasher, Hasher};

#[derive(Debug)]
pub struct CookiePersistence {
    name: String,
    /// The cookie value of each server.
    ids: Vec<String>,
    inner: Box<dyn Scheduler>,
}

/// Builds a module by name with no options: the registry's `build`, handed in so that this
/// file does not import the registry that imports it.
pub type BuildInner =
    fn(&str, &[(String, OptionValue)], &BuildContext<'_>) -> Result<Box<dyn Scheduler>, BuildError>;

impl CookiePersistence {
    pub fn build(
        options: &mut Options<'_>,
        context: &BuildContext<'_>,
        build_inner: BuildInner,
    ) -> Result<Self, BuildError> {
        let name = match options.string("name").map_err(BuildError::BadOption)? {
            None => "TCPVS".to_string(),
            Some((i, n)) => {
                if !is_token(n) {
                    return Err(BuildError::BadOption(
                        options.error_at(i, format!("invalid cookie name {n:?}")),
                    ));
                }
                n.to_string()
            }
        };
        let secret = options
            .string("secret")
            .map_err(BuildError::BadOption)?
            .map(|(_, s)| s.to_string());
        let inner_name = match options.string("inner").map_err(BuildError::BadOption)? {
            None => "wlc",
            Some((i, "cookie")) => {
                return Err(BuildError::BadOption(
                    options.error_at(i, "inner = \"cookie\" would never place a client"),
                ))
            }
            Some((_, n)) => n,
        };
        let inner = build_inner(inner_name, &[], context).map_err(|e| match e {
            BuildError::UnknownModule(m) => BuildError::BadOption(options.error_at(
                options.index_of("inner").unwrap_or(0),
                match crate::suggest(&m, crate::MODULE_NAMES) {
                    Some(close) => {
                        format!("unknown inner scheduler `{m}`: did you mean `{close}`?")
                    }
                    None => format!("unknown inner scheduler `{m}`"),
                },
            )),
            other => other,
        })?;
        let (k0, k1) = match &secret {
            Some(s) => (
                crate::key::stable_hash(s.as_bytes()),
                crate::key::stable_hash(&[s.as_bytes(), b"#1"].concat()),
            ),
            None => random_key(),
        };
        let ids = context
            .server_ids
            .iter()
            .map(|id| {
                let mut h = SipHasher24::new_with_keys(k0, k1);
                h.write(id.as_bytes());
                format!("{:016x}", h.finish())
            })
            .collect();
        Ok(CookiePersistence { name, ids, inner })
    }

    fn cookie_server(&self, request: &RequestView<'_>) -> Option<usize> {
        let value = cookie_value(request, &self.name)?;
        self.ids.iter().position(|id| id.as_bytes() == value)
    }
}

/// A key nobody can predict, for processes without a configured secret. std's RandomState is
/// seeded from the operating system's random source.
fn random_key() -> (u64, u64) {
    let state = std::collections::hash_map::RandomState::new();
    (state.hash_one(0x6b30u64), state.hash_one(0x6b31u64))
}

impl Scheduler for CookiePersistence {
    fn name(&self) -> &'static str {
        "cookie"
    }

    fn pick(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        if let Some(s) = self.cookie_server(request) {
            // A draining server keeps the clients that persist on it.
            if s < pool.servers.len()
                && pool.servers[s].load().keeps_persistent()
                && !tried.contains(&s)
            {
                return Some(s);
            }
        }
        self.inner.pick(request, pool, tried)
    }

    fn response_field(&self, request: &RequestView<'_>, server: usize) -> Option<ResponseField> {
        if self.cookie_server(request) == Some(server) {
            return None;
        }
        let id = self.ids.get(server)?;
        Some(ResponseField {
            name: "Set-Cookie",
            value: format!("{}={id}; Path=/; HttpOnly", self.name),
        })
    }

    fn connection_started(&self, server: usize) {
        self.inner.connection_started(server);
    }

    fn connection_ended(&self, server: usize) {
        self.inner.connection_ended(server);
    }

    fn servers_changed(&self, pool: &PoolView<'_>) {
        self.inner.servers_changed(pool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MonotonicClock;
    use crate::testing::{pool_of, request, Headers};
    use crate::OptionValue;
    use std::sync::Arc;

    fn cookie(pool: &PoolView<'_>, ids: &[String], secret: Option<&str>) -> CookiePersistence {
        let mut given = vec![("name".to_string(), OptionValue::String("SRV".into()))];
        if let Some(s) = secret {
            given.push(("secret".to_string(), OptionValue::String(s.into())));
        }
        let mut o = Options::new("cookie", &given);
        let context = BuildContext {
            pool: *pool,
            server_ids: ids,
            clock: Arc::new(MonotonicClock::new()),
        };
        let c = CookiePersistence::build(&mut o, &context, crate::build).unwrap();
        o.finish().unwrap();
        c
    }

    #[test]
    fn first_response_sets_the_cookie_and_later_requests_stick() {
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let ids: Vec<String> = (1..=3).map(|i| format!("10.0.0.{i}:80")).collect();
        let c = cookie(&pool, &ids, Some("s3cret"));
        let first = c.pick(&request(), &pool, &[]).unwrap();
        let field = c.response_field(&request(), first).unwrap();
        assert_eq!(field.name, "Set-Cookie");
        let value = field
            .value
            .strip_prefix("SRV=")
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        assert!(field.value.ends_with("; Path=/; HttpOnly"));
        assert!(
            !field.value.contains("10.0.0"),
            "the cookie must not reveal the address"
        );

        let cookie_field = format!("other=1; SRV={value}").into_bytes();
        let headers = Headers(vec![("cookie", Box::leak(cookie_field.into_boxed_slice()))]);
        let mut r = request();
        r.headers = &headers;
        for _ in 0..50 {
            assert_eq!(c.pick(&r, &pool, &[]), Some(first));
        }
        assert_eq!(
            c.response_field(&r, first),
            None,
            "no new cookie while it holds"
        );

        // The server goes down: another one, and the cookie is re-issued for it.
        servers[first].set_up(false);
        let fallback = c.pick(&r, &pool, &[]).unwrap();
        assert_ne!(fallback, first);
        let reissued = c.response_field(&r, fallback).unwrap();
        assert!(!reissued.value.contains(&value));
    }

    #[test]
    fn a_cookie_name_must_be_a_token() {
        let servers = pool_of(&[1]);
        let ids = vec!["a:1".to_string()];
        let context = BuildContext {
            pool: PoolView { servers: &servers },
            server_ids: &ids,
            clock: Arc::new(MonotonicClock::new()),
        };
        for bad in ["", "S RV", "SRV=1"] {
            let given = vec![("name".to_string(), OptionValue::String(bad.into()))];
            let mut o = Options::new("cookie", &given);
            match CookiePersistence::build(&mut o, &context, crate::build) {
                Err(BuildError::BadOption(e)) => {
                    assert_eq!(e.index, 0);
                    assert!(e.message.contains("invalid cookie name"), "{e:?}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_secret_makes_ids_stable_across_instances() {
        let servers = pool_of(&[1, 1]);
        let pool = PoolView { servers: &servers };
        let ids: Vec<String> = vec!["a:1".into(), "b:2".into()];
        let a = cookie(&pool, &ids, Some("k"));
        let b = cookie(&pool, &ids, Some("k"));
        let c = cookie(&pool, &ids, Some("other"));
        assert_eq!(a.ids, b.ids);
        assert_ne!(a.ids, c.ids);
        assert_ne!(a.ids[0], a.ids[1]);
    }
}
