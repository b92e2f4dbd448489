//! The switch at the edge of a network: what comes before HTTP on a connection. Today the
//! PROXY protocol ([`proxy_protocol`]): the real client's address from an L4 director in
//! front of the switch (`proxy_protocol = true` on a virtual service), and passed on to servers
//! (`send_proxy` on a pool).

pub mod proxy_protocol;
