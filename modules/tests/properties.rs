//! Properties every module must keep, over random pools and requests (proptest).

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use tcpvs_modules::{
    build, BuildContext, HeaderLookup, ManualClock, OptionValue, PoolView, RequestView, Scheduler,
    ServerState, MODULE_NAMES,
};

struct Headers(Vec<(&'static str, Vec<u8>)>);
impl HeaderLookup for Headers {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

fn ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.1.{}.{}:80", i / 200, i % 200))
        .collect()
}

fn module(
    name: &str,
    options: &[(String, OptionValue)],
    servers: &[ServerState],
    ids: &[String],
) -> Box<dyn Scheduler> {
    let context = BuildContext {
        pool: PoolView { servers },
        server_ids: ids,
        clock: Arc::new(ManualClock::new()),
    };
    build(name, options, &context).unwrap()
}

fn request<'a>(path: &'a [u8], headers: &'a Headers, client: u8) -> RequestView<'a> {
    RequestView {
        method: "GET",
        path,
        query: None,
        host: None,
        headers,
        client: IpAddr::V4(Ipv4Addr::new(198, 51, 100, client)),
    }
}

proptest! {
    // Integration tests have no lib.rs or main.rs above them, so proptest's default
    // (SourceParallel) warns and falls back to this very file; naming it keeps failing seeds
    // next to this file, silently.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions"
        ))),
        ..ProptestConfig::with_cases(200)
    })]

    /// No module answers a down or quiescent server while a usable one exists, and none
    /// answers `None` then; nor does any return a server it was told was tried.
    #[test]
    fn only_usable_servers_are_picked(
        pool in prop::collection::vec((0u32..4, any::<bool>(), 0u32..80), 1..12),
        paths in prop::collection::vec("/[a-z]{1,3}(/[a-z0-9]{1,4})?", 1..20),
        tried_mask in any::<u16>(),
        cookie in prop::option::of("[0-9a-f]{16}"),
    ) {
        let servers: Vec<ServerState> = pool.iter().map(|&(w, _, _)| ServerState::new(w)).collect();
        for (s, &(_, up, active)) in servers.iter().zip(&pool) {
            s.set_up(up);
            for _ in 0..active {
                s.add_active();
            }
        }
        let ids = ids(servers.len());
        let tried: Vec<usize> = (0..servers.len()).filter(|i| tried_mask & (1 << i) != 0).collect();
        let usable = |i: usize| servers[i].is_up() && servers[i].weight() > 0;
        let mut headers = vec![("x-user", b"u1".to_vec())];
        if let Some(c) = &cookie {
            headers.push(("cookie", format!("TCPVS={c}").into_bytes()));
        }
        let headers = Headers(headers);
        for &name in MODULE_NAMES {
            let m = module(name, &[], &servers, &ids);
            for (k, p) in paths.iter().enumerate() {
                let r = request(p.as_bytes(), &headers, k as u8);
                for t in [&[][..], &tried[..]] {
                    let any = (0..servers.len()).any(|i| usable(i) && !t.contains(&i));
                    match m.pick(&r, &PoolView { servers: &servers }, t) {
                        Some(s) => {
                            prop_assert!(usable(s), "{name} picked unusable server {s}");
                            prop_assert!(!t.contains(&s), "{name} picked tried server {s}");
                        }
                        None => prop_assert!(!any, "{name} found nothing though a server was usable"),
                    }
                }
            }
        }
    }

    /// `hash` never puts a key on a server already holding ceil(balance_factor * mean) active
    /// requests, whatever the keys and whatever requests end meanwhile.
    #[test]
    fn hash_respects_the_load_bound(
        n in 2usize..12,
        factor in prop::sample::select(vec![1.0f64, 1.1, 1.25, 1.5, 2.0]),
        steps in prop::collection::vec((0u16..30, any::<bool>()), 1..300),
    ) {
        let servers: Vec<ServerState> = (0..n).map(|_| ServerState::new(1)).collect();
        let ids = ids(n);
        let options = vec![("balance_factor".to_string(), OptionValue::Float(factor))];
        let m = module("hash", &options, &servers, &ids);
        let headers = Headers(vec![]);
        let mut held: Vec<usize> = Vec::new();
        for (key, release) in steps {
            if release && !held.is_empty() {
                let s = held.remove(key as usize % held.len());
                servers[s].remove_active();
                m.connection_ended(s);
                continue;
            }
            let path = format!("/k/{}", key % 7); // few keys: hot ones must spill
            let r = request(path.as_bytes(), &headers, 1);
            let s = m.pick(&r, &PoolView { servers: &servers }, &[]).unwrap();
            servers[s].add_active();
            m.connection_started(s);
            held.push(s);
            let total = held.len() as f64;
            let bound = (factor * total / n as f64).ceil() as u32;
            prop_assert!(servers[s].active() <= bound,
                "server {s} holds {} with bound {bound} (total {total})", servers[s].active());
        }
    }

    /// Removing one of N servers moves exactly its keys; adding one moves keys only to it, and
    /// about 1/N of them.
    #[test]
    fn hash_remaps_about_one_nth(n in 3usize..16, victim in any::<prop::sample::Index>()) {
        check_remapping(&vec![1; n + 1], victim.index(n))?;
    }

    /// The same with mixed weights: a server's share of the ring depends on its own weight
    /// only, so adding one moves keys only onto it (about its share of the total weight), and
    /// removing one moves only its keys.
    #[test]
    fn hash_remaps_only_the_changed_server_with_mixed_weights(
        weights in prop::collection::vec(1u32..=3, 4..17),
        victim in any::<prop::sample::Index>(),
    ) {
        check_remapping(&weights, victim.index(weights.len() - 1))?;
    }
}

/// The case proptest once shrank a "keys moved between old servers" failure to. That run had
/// linked a stale build of the library whose ring scaled every server's points by the pool's
/// total weight (a newcomer of weight 2 took the others from 160 points to 128); fixed here so
/// every build checks it, whatever seeds proptest draws.
#[test]
fn adding_a_heavier_server_moves_keys_only_onto_it() {
    check_remapping(&[1, 1, 1, 2], 0).unwrap();
}

/// Places 3000 keys with `hash` (no load bound) on the first N = `weights.len() - 1` servers,
/// then with the last one added, then without the first N's server `v`.
fn check_remapping(weights: &[u32], v: usize) -> Result<(), TestCaseError> {
    let n = weights.len() - 1;
    let options = vec![("balance_factor".to_string(), OptionValue::Integer(0))];
    let headers = Headers(vec![]);
    let keys: Vec<String> = (0..3000).map(|i| format!("/obj/{i}")).collect();
    let place = |servers: &[ServerState], ids: &[String]| -> Vec<String> {
        let m = module("hash", &options, servers, ids);
        keys.iter()
            .map(|k| {
                ids[m
                    .pick(
                        &request(k.as_bytes(), &headers, 1),
                        &PoolView { servers },
                        &[],
                    )
                    .unwrap()]
                .clone()
            })
            .collect()
    };
    let all_ids = ids(n + 1);
    let servers: Vec<ServerState> = weights.iter().map(|&w| ServerState::new(w)).collect();
    let with_n = place(&servers[..n], &all_ids[..n]);
    let with_more = place(&servers, &all_ids);
    let newcomer = &all_ids[n];
    let moved: Vec<usize> = (0..keys.len())
        .filter(|&i| with_n[i] != with_more[i])
        .collect();
    prop_assert!(
        moved.iter().all(|&i| &with_more[i] == newcomer),
        "keys moved between old servers"
    );
    // At most twice the newcomer's share of the weight (1/(N+1) with equal weights).
    let total: u32 = weights.iter().sum();
    prop_assert!(
        moved.len() * total as usize <= 2 * keys.len() * weights[n] as usize,
        "adding moved {} of {}",
        moved.len(),
        keys.len()
    );

    let mut fewer_ids = all_ids[..n].to_vec();
    fewer_ids.remove(v);
    let fewer: Vec<ServerState> = (0..n)
        .filter(|&i| i != v)
        .map(|i| ServerState::new(weights[i]))
        .collect();
    let without = place(&fewer, &fewer_ids);
    let moved = (0..keys.len()).filter(|&i| with_n[i] != without[i]).count();
    let owned = with_n.iter().filter(|s| **s == all_ids[v]).count();
    prop_assert_eq!(moved, owned, "only the removed server's keys move");
    // At most twice the victim's share of the N servers' weight (1/N with equal weights).
    let weight_of_n: u32 = weights[..n].iter().sum();
    prop_assert!(
        moved * weight_of_n as usize <= 2 * keys.len() * weights[v] as usize,
        "removing moved {} of {}",
        moved,
        keys.len()
    );
    Ok(())
}

/// A pool may have no server at all (one that finds its servers by DNS, before any answer):
/// every module builds over it, picks nothing and takes the events of an empty pool.
#[test]
fn an_empty_pool_builds_and_picks_nothing() {
    let servers: Vec<ServerState> = Vec::new();
    let headers = Headers(vec![("cookie", b"TCPVS=0123456789abcdef".to_vec())]);
    for &name in MODULE_NAMES {
        let m = module(name, &[], &servers, &[]);
        let pool = PoolView { servers: &servers };
        m.servers_changed(&pool);
        for client in 0..4 {
            let r = request(b"/a/b", &headers, client);
            assert_eq!(
                m.pick_with_ticket(&r, &pool, &[]).map(|(s, _)| s),
                None,
                "{name}"
            );
        }
    }
}
