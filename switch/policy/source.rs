//! The `source` condition: the client's address (the one a PROXY header names, when the
//! service takes them) in a list of networks, `["10.0.0.0/8", "::1"]`. IPv4 addresses are
//! compared as IPv4 whether the socket gave them plain or IPv4-mapped (`::ffff:10.0.0.1`).

use std::net::IpAddr;

/// One network of a `source` list: an address and the length of its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Network {
    /// The address as 128 bits: IPv4 as its IPv4-mapped IPv6 form, so one comparison serves
    /// both families.
    bits: u128,
    mask: u128,
}

/// A `source` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceList {
    networks: Vec<Network>,
}

impl SourceList {
    /// Parses each entry (`ADDR` or `ADDR/PREFIX`); the errors say which entry and why.
    pub fn parse(entries: &[&str]) -> Result<SourceList, Vec<(usize, String)>> {
        let mut networks = Vec::with_capacity(entries.len());
        let mut errors = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            match parse_network(entry) {
                Ok(network) => networks.push(network),
                Err(why) => errors.push((i, why)),
            }
        }
        if errors.is_empty() {
            Ok(SourceList { networks })
        } else {
            Err(errors)
        }
    }

    /// Whether `client` is in one of the networks.
    pub fn contains(&self, client: IpAddr) -> bool {
        let bits = as_bits(client);
        self.networks.iter().any(|n| bits & n.mask == n.bits)
    }
}

/// IPv4 in its IPv4-mapped IPv6 form, so that `10.0.0.0/8` matches `::ffff:10.0.0.1` too.
fn as_bits(address: IpAddr) -> u128 {
    match address.to_canonical() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn parse_network(entry: &str) -> Result<Network, String> {
    let (address, prefix) = match entry.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (entry, None),
    };
    let address: IpAddr = address.parse().map_err(|_| {
        format!("{entry:?} is not an address or network like \"10.0.0.0/8\" or \"::1\"")
    })?;
    let address = address.to_canonical();
    let family_bits: u32 = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => family_bits,
        Some(text) => match text.parse::<u32>() {
            Ok(n) if n <= family_bits && !text.starts_with('+') => n,
            _ => {
                return Err(format!(
                    "{entry:?}: the prefix length must be 0 to {family_bits}"
                ))
            }
        },
    };
    // IPv4 prefixes count within the mapped form's last 32 bits.
    let prefix = prefix + (128 - family_bits);
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    let bits = as_bits(address);
    if bits & mask != bits {
        return Err(format!(
            "{entry:?} has bits set past its prefix: write the network's first address"
        ));
    }
    Ok(Network { bits, mask })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_and_single_addresses() {
        let list =
            SourceList::parse(&["10.0.0.0/8", "::1", "192.168.1.7", "2001:db8::/32"]).unwrap();
        assert!(list.contains(ip("10.1.2.3")));
        assert!(list.contains(ip("::ffff:10.1.2.3")));
        assert!(!list.contains(ip("11.0.0.1")));
        assert!(list.contains(ip("::1")));
        assert!(!list.contains(ip("127.0.0.1")));
        assert!(list.contains(ip("192.168.1.7")));
        assert!(!list.contains(ip("192.168.1.8")));
        assert!(list.contains(ip("2001:db8:ffff::9")));
        assert!(!list.contains(ip("2001:db9::1")));
    }

    #[test]
    fn everyone_and_no_one() {
        let all = SourceList::parse(&["0.0.0.0/0", "::/0"]).unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!(all.contains(ip("fe80::1")));
        let v4_only = SourceList::parse(&["0.0.0.0/0"]).unwrap();
        assert!(!v4_only.contains(ip("fe80::1")));
    }

    #[test]
    fn bad_entries_are_named() {
        let errors =
            SourceList::parse(&["10.0.0.0/8", "10.0.0.0/33", "nope", "10.0.0.1/8"]).unwrap_err();
        let which: Vec<usize> = errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(which, vec![1, 2, 3]);
        assert!(SourceList::parse(&["::/129"]).is_err());
        assert!(SourceList::parse(&["10.0.0.0/+8"]).is_err());
    }
}
