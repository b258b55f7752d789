//! Property tests: the classifiers read packet bytes from the network and text from
//! configuration files; whatever they are given, they answer (a class, or a typed error) and
//! never panic.

use super::*;
use crate::wire::is_tcp_pure_ack;
use proptest::prelude::*;

fn rules() -> RuleClassifier {
    let cfg: RuleClassifierConfig = serde_json::from_str(
        r#"{"default_class": 9, "rules": [
            {"protocol": "tcp", "tcp_pure_ack": true, "class": 0},
            {"protocol": "udp", "dst_port": "53", "class": 1},
            {"src": "10.0.0.0/8", "src_port": "1024-65535", "class": 2},
            {"dst": "2001:db8::/32", "class": 3}]}"#,
    )
    .unwrap();
    cfg.build().unwrap()
}

fn table() -> CidrTable {
    let mut t = CidrTable::new(7);
    for (c, k) in [("10.0.0.0/8", 0), ("10.1.0.0/16", 1), ("2001:db8::/32", 2)] {
        t.add_str(c, k).unwrap();
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes get a class the classifier can give, and the pure-ACK classifier agrees
    /// with the wire test it wraps.
    #[test]
    fn classifiers_answer_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..120),
                                    v6 in any::<bool>()) {
        let mut bytes = bytes;
        if let Some(b) = bytes.first_mut() {
            *b = if v6 { 0x60 | (*b & 0x0f) } else { 0x45 };
        }
        let class = rules().classify(bytes.as_slice());
        prop_assert!([0, 1, 2, 3, 9].contains(&class), "{}", class);
        let class = table().classify(bytes.as_slice());
        prop_assert!([0, 1, 2, 7].contains(&class), "{}", class);
        let ack = PureAckClassifier.classify(bytes.as_slice());
        prop_assert_eq!(ack, if is_tcp_pure_ack(&bytes) { 0 } else { 1 });
    }

    /// Any text is a CIDR or a typed error that keeps the text; a parsed CIDR prints back to
    /// text that parses to the same CIDR.
    #[test]
    fn cidr_text_parses_or_names_the_text(text in "[0-9a-fA-F:./x -]{0,48}") {
        match text.parse::<Cidr>() {
            Ok(c) => prop_assert_eq!(c.to_string().parse::<Cidr>(), Ok(c)),
            Err(CidrError::NotAnAddress { text: t, .. })
            | Err(CidrError::BadPrefixLength { text: t, .. })
            | Err(CidrError::PrefixTooLong { text: t, .. })
            | Err(CidrError::HostBitsSet { text: t, .. }) => prop_assert_eq!(t, text),
        }
    }

    /// Any text is a port range with low <= high, or an error naming the text.
    #[test]
    fn port_range_text_parses_or_names_the_text(text in "[0-9 -]{0,14}") {
        match PortRange::parse(&text) {
            Ok(r) => prop_assert!(r.low <= r.high),
            Err(e) => prop_assert_eq!(e.text, text),
        }
    }
}
