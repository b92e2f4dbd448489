//! The data passed between the steps: the KTCPVS file as parsed (services, servers, rules)
//! and the tcpvs rule file before it is written as text.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use super::Pos;

// ---------------------------------------------------------------- the file's structure

/// `HOST[:PORT]` as KTCPVS resolved it; `port` is `None` when none was written (0 to KTCPVS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Addr {
    pub(super) ip: Ipv4Addr,
    pub(super) port: Option<u16>,
    pub(super) text: String,
}

impl Addr {
    /// The address KTCPVS compared: a missing port is 0.
    pub(super) fn key(&self) -> (Ipv4Addr, u16) {
        (self.ip, self.port.unwrap_or(0))
    }

    /// As written, and as read when that differs: `web1:www (10.0.0.1:80)`.
    pub(super) fn shown(&self) -> String {
        let read = self.to_string();
        if read == self.text {
            read
        } else {
            format!("{} ({read})", self.text)
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.port.unwrap_or(0))
    }
}

#[derive(Debug)]
pub(super) struct Setting<T> {
    pub(super) value: T,
    /// Where the value is written.
    pub(super) at: Pos,
}

#[derive(Debug)]
pub(super) struct Knob {
    pub(super) key: &'static str,
    pub(super) value: u32,
    pub(super) line: usize,
    /// Where its statement begins.
    pub(super) at: Pos,
}

#[derive(Debug)]
pub(super) struct KServer {
    pub(super) addr: Addr,
    pub(super) at: Pos,
    pub(super) weight: u32,
    pub(super) line: usize,
}

#[derive(Debug)]
pub(super) struct KRule {
    pub(super) pattern: String,
    pub(super) pattern_at: Pos,
    /// `match N`, and the line it is on.
    pub(super) match_num: Option<u32>,
    pub(super) target: Addr,
    pub(super) target_at: Pos,
    pub(super) line: usize,
}

#[derive(Debug)]
pub(super) struct KService {
    pub(super) name: String,
    pub(super) at: Pos,
    pub(super) name_at: Pos,
    pub(super) listen: Option<Setting<Addr>>,
    pub(super) scheduler: Option<Setting<String>>,
    pub(super) redirect: Option<Setting<Addr>>,
    pub(super) knobs: Vec<Knob>,
    pub(super) servers: Vec<KServer>,
    pub(super) rules: Vec<KRule>,
    /// Settings a later one of the same key replaced (where each was written).
    pub(super) overridden: Vec<Pos>,
    /// Servers whose line has an error: rules naming them are not checked further.
    pub(super) broken: Vec<(Ipv4Addr, u16)>,
}

// ---------------------------------------------------------------- the tcpvs side

#[derive(Default)]
pub(super) struct Out {
    /// `[switch] max_clients` and its comment.
    pub(super) max_clients: Option<(u64, String)>,
    pub(super) services: Vec<OutService>,
    pub(super) pools: Vec<OutPool>,
}

pub(super) struct OutService {
    pub(super) name: String,
    pub(super) comment: String,
    pub(super) listen: String,
    pub(super) default_pool: Option<(String, String)>,
    /// Comment lines in the service's table: what has no equivalent, how rules are ordered.
    pub(super) notes: Vec<String>,
    pub(super) rules: Vec<OutRule>,
}

pub(super) struct OutRule {
    pub(super) comment: String,
    pub(super) path: String,
    pub(super) pool: String,
}

pub(super) struct OutPool {
    pub(super) name: String,
    pub(super) notes: Vec<String>,
    pub(super) scheduler: &'static str,
    /// Module options, each value already TOML.
    pub(super) options: Vec<(&'static str, String)>,
    pub(super) servers: Vec<OutServer>,
}

pub(super) struct OutServer {
    pub(super) addr: SocketAddrV4,
    pub(super) weight: u32,
    pub(super) backup: bool,
    pub(super) comment: String,
}
