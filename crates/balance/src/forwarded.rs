//! The client's address in the request headers the L7 path sends to a backend (`forwarded` in
//! the configuration; docs/balance.md, "Client address to backends").
//!
//! - `X-Forwarded-For: <client address>`, as HAProxy's `option forwardfor` writes it.
//! - `Forwarded: for=<node>;proto=http;host=<host>` (RFC 7239): `for` is the client's address
//!   (§5.2), an IPv6 address in brackets and quotes (§6, as `for="[2001:db8::1]"`: `:` and
//!   `[` are no token characters, so the value is a quoted-string, §4); `proto` is the scheme
//!   the client spoke (§5.4: `https` on a listener with `[tls]`, else `http`); `host` the request's Host field
//!   (§5.3), quoted unless it is a token.
//!
//! A field the client sent is kept and our element added at its end: after a comma to the
//! last field line of that name (RFC 7239 §4; RFC 9110 §5.3 makes this the same as a field
//! line of its own), as HAProxy's `option forwardfor` keeps the client's. So the last element
//! is the one the balancer wrote and the only one a backend may take as the true peer; the
//! ones before are whatever the client claimed.
//!
//! An IPv4 client on a dual-stack IPv6 listener (`::ffff:192.0.2.1`) is written as the IPv4
//! address it is.
//!
//! Cost: the two values are made once per client connection; per request, one header map
//! look-up per header and a copy of the field it extends.

use crate::config::Forwarded;
use hyper::header::{Entry, HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

static XFF: HeaderName = HeaderName::from_static("x-forwarded-for");
static FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// A client connection's address as the two headers write it, made once per connection.
#[derive(Debug, Clone)]
pub struct ClientFor {
    /// The address as `X-Forwarded-For` writes it.
    xff: Vec<u8>,
    /// `for=<node>` of a `Forwarded` element.
    node: Vec<u8>,
    /// `;proto=<scheme>`: what the client spoke to the listener.
    proto: &'static [u8],
}

impl ClientFor {
    pub fn new(ip: IpAddr) -> Self {
        let ip = ip.to_canonical();
        let text = ip.to_string();
        let node = match ip {
            IpAddr::V4(_) => format!("for={text}"),
            IpAddr::V6(_) => format!("for=\"[{text}]\""),
        };
        ClientFor {
            xff: text.into_bytes(),
            node: node.into_bytes(),
            proto: b";proto=http",
        }
    }

    /// The client spoke TLS to the listener (`[tls]`): `proto=https`.
    pub fn over_tls(mut self, tls: bool) -> Self {
        if tls {
            self.proto = b";proto=https";
        }
        self
    }

    /// Add the headers `how` asks for to a request whose Host field is in `h`.
    pub fn add(&self, how: Forwarded, h: &mut HeaderMap) {
        if matches!(how, Forwarded::XForwardedFor | Forwarded::Both) {
            append_element(h, &XFF, &self.xff);
        }
        if matches!(how, Forwarded::Forwarded | Forwarded::Both) {
            let mut e = Vec::with_capacity(self.node.len() + 64);
            e.extend_from_slice(&self.node);
            e.extend_from_slice(self.proto);
            if let Some(host) = h.get(hyper::header::HOST) {
                e.extend_from_slice(b";host=");
                put_value(&mut e, host.as_bytes());
            }
            append_element(h, &FORWARDED, &e);
        }
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A parameter value (RFC 7239 §4): a token as it is, anything else as a quoted-string with
/// `"` and `\` escaped (RFC 9110 §5.6.4).
fn put_value(out: &mut Vec<u8>, v: &[u8]) {
    if !v.is_empty() && v.iter().all(|&b| tchar(b)) {
        out.extend_from_slice(v);
        return;
    }
    out.push(b'"');
    for &b in v {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// `element` added to the last field line named `name` after `", "`, or as the only one.
fn append_element(h: &mut HeaderMap, name: &HeaderName, element: &[u8]) {
    match h.entry(name) {
        Entry::Occupied(mut e) => {
            let Some(last) = e.iter_mut().last() else {
                return;
            };
            let mut v = Vec::with_capacity(last.len() + 2 + element.len());
            v.extend_from_slice(last.as_bytes());
            v.extend_from_slice(b", ");
            v.extend_from_slice(element);
            // Both parts are valid field values (no CR, LF or NUL): so is their join.
            if let Ok(joined) = HeaderValue::from_bytes(&v) {
                *last = joined;
            }
        }
        Entry::Vacant(e) => {
            if let Ok(v) = HeaderValue::from_bytes(element) {
                e.insert(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HOST;

    fn fields(h: &HeaderMap, name: &str) -> Vec<String> {
        h.get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    }

    fn with_host(host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_str(host).unwrap());
        h
    }

    #[test]
    fn ipv4_client_in_both_headers() {
        let c = ClientFor::new("192.0.2.43".parse().unwrap());
        let mut h = with_host("example.com");
        c.add(Forwarded::Both, &mut h);
        assert_eq!(fields(&h, "x-forwarded-for"), ["192.0.2.43"]);
        assert_eq!(
            fields(&h, "forwarded"),
            ["for=192.0.2.43;proto=http;host=example.com"]
        );
    }

    /// RFC 7239 §6: an IPv6 node is bracketed and, not being a token, quoted; a host with a
    /// port (`:` is no token character) is quoted.
    #[test]
    fn ipv6_client_is_bracketed_and_quoted() {
        let c = ClientFor::new("2001:db8:cafe::17".parse().unwrap());
        let mut h = with_host("example.com:8080");
        c.add(Forwarded::Forwarded, &mut h);
        assert_eq!(
            fields(&h, "forwarded"),
            ["for=\"[2001:db8:cafe::17]\";proto=http;host=\"example.com:8080\""]
        );
        assert!(h.get("x-forwarded-for").is_none());
        let mut h = with_host("[::1]:80");
        c.add(Forwarded::XForwardedFor, &mut h);
        assert_eq!(fields(&h, "x-forwarded-for"), ["2001:db8:cafe::17"]);
        assert!(h.get("forwarded").is_none());
    }

    #[test]
    fn an_ipv4_mapped_client_is_written_as_ipv4() {
        let c = ClientFor::new("::ffff:198.51.100.9".parse().unwrap());
        let mut h = with_host("a");
        c.add(Forwarded::Both, &mut h);
        assert_eq!(fields(&h, "x-forwarded-for"), ["198.51.100.9"]);
        assert_eq!(
            fields(&h, "forwarded"),
            ["for=198.51.100.9;proto=http;host=a"]
        );
    }

    /// The client's fields are kept; ours is added to the last line after a comma.
    #[test]
    fn the_clients_fields_are_kept_and_ours_appended_to_the_last() {
        let c = ClientFor::new("192.0.2.43".parse().unwrap());
        let mut h = with_host("a.test");
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        h.append("x-forwarded-for", HeaderValue::from_static("10.0.0.2"));
        h.append("forwarded", HeaderValue::from_static("for=unknown"));
        c.add(Forwarded::Both, &mut h);
        assert_eq!(
            fields(&h, "x-forwarded-for"),
            ["10.0.0.1", "10.0.0.2, 192.0.2.43"]
        );
        assert_eq!(
            fields(&h, "forwarded"),
            ["for=unknown, for=192.0.2.43;proto=http;host=a.test"]
        );
    }

    #[test]
    fn off_adds_nothing_and_a_missing_host_is_left_out() {
        let c = ClientFor::new("192.0.2.43".parse().unwrap());
        let mut h = HeaderMap::new();
        c.add(Forwarded::Off, &mut h);
        assert!(h.is_empty());
        c.add(Forwarded::Forwarded, &mut h);
        assert_eq!(fields(&h, "forwarded"), ["for=192.0.2.43;proto=http"]);
        let mut h = HeaderMap::new();
        c.clone().over_tls(true).add(Forwarded::Forwarded, &mut h);
        assert_eq!(fields(&h, "forwarded"), ["for=192.0.2.43;proto=https"]);
    }

    #[test]
    fn values_that_are_no_token_are_quoted_and_escaped() {
        let mut out = Vec::new();
        put_value(&mut out, b"a\"b\\c d");
        assert_eq!(out, b"\"a\\\"b\\\\c d\"");
        out.clear();
        put_value(&mut out, b"");
        assert_eq!(out, b"\"\"");
        out.clear();
        put_value(&mut out, b"host.example");
        assert_eq!(out, b"host.example");
    }
}
