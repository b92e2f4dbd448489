//! `source-hash`: the client's IP address on the same bounded-load consistent-hash ring as
//! `hash`, so a client keeps its server while that server is not overloaded.

use crate::hash::ConsistentHash;
use crate::key::KeySource;
use crate::options::Options;
use crate::{BuildError, PoolView};

pub fn build(
    options: &mut Options<'_>,
    pool: &PoolView<'_>,
    server_ids: &[String],
) -> Result<ConsistentHash, BuildError> {
    ConsistentHash::with_key("source-hash", KeySource::Source, options, pool, server_ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request};
    use crate::Scheduler;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn a_client_keeps_its_server() {
        let servers = pool_of(&[1; 4]);
        let pool = PoolView { servers: &servers };
        let ids: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
        let mut o = Options::new("source-hash", &[]);
        let h = build(&mut o, &pool, &ids).unwrap();
        let mut seen = std::collections::HashSet::new();
        for c in 0..64u8 {
            let mut r = request();
            r.client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, c));
            let s = h.pick(&r, &pool, &[]).unwrap();
            assert_eq!(h.pick(&r, &pool, &[]), Some(s));
            seen.insert(s);
        }
        assert_eq!(seen.len(), 4, "clients spread over the pool");
        // An IPv4 client seen through an IPv6 socket is the same client.
        let mut v4 = request();
        v4.client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
        let mut mapped = request();
        mapped.client = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped());
        assert_eq!(h.pick(&v4, &pool, &[]), h.pick(&mapped, &pool, &[]));
    }
}
