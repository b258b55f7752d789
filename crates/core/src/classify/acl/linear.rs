//! The reference classifier: every rule in priority order, the first that matches wins (the
//! semantics of an iptables chain). Used as the oracle of the other structures' tests and as
//! the baseline of their benchmark.
//!
//! Cost: O(rules) per packet, a few comparisons per rule on a 28-byte record. Build O(rules).
//! Memory: 28 bytes per rule.

use super::{
    ClassifierBuildError, ClassifierLimits, FiveTuple, PackedRule, PacketClassifier, ProtoMatch,
    RuleSet,
};

#[derive(Debug, Clone)]
pub struct LinearClassifier {
    rules: Vec<(PackedRule, ProtoMatch)>,
}

impl LinearClassifier {
    pub fn build(
        rules: &RuleSet,
        limits: &ClassifierLimits,
    ) -> Result<LinearClassifier, ClassifierBuildError> {
        limits.check_rules(rules.len())?;
        let bytes = rules.len() * std::mem::size_of::<(PackedRule, ProtoMatch)>();
        if bytes > limits.max_bytes {
            return Err(ClassifierBuildError::TooManyBytes {
                rule: rules.len().saturating_sub(1),
                bytes,
                max: limits.max_bytes,
            });
        }
        Ok(LinearClassifier {
            rules: rules.rules.iter().map(PackedRule::new).collect(),
        })
    }
}

impl PacketClassifier for LinearClassifier {
    fn first_match(&self, key: &FiveTuple) -> Option<u32> {
        self.rules
            .iter()
            .position(|(r, p)| p.matches(key.proto) && r.matches_fields(key))
            .map(|i| i as u32)
    }
    fn memory_bytes(&self) -> usize {
        self.rules.capacity() * std::mem::size_of::<(PackedRule, ProtoMatch)>()
    }
    fn tuples(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AclRule, Action, Ipv4Prefix, ProtoMatch, ANY_PORT};
    use super::*;
    use crate::classify::PortRange;

    /// Hand-checked: a specific rule before a broader one, the broader one, and a miss.
    #[test]
    fn first_matching_rule_in_order() {
        let web = AclRule {
            dst: Ipv4Prefix::new(0x0A00_0000, 8).unwrap(),
            dst_port: PortRange { low: 80, high: 80 },
            proto: ProtoMatch::exact(6),
            ..AclRule::any(Action::Accept)
        };
        let ten = AclRule {
            dst: Ipv4Prefix::new(0x0A00_0000, 8).unwrap(),
            src_port: ANY_PORT,
            ..AclRule::any(Action::Drop)
        };
        let set = RuleSet::new(vec![web, ten]);
        let c = LinearClassifier::build(&set, &ClassifierLimits::default()).unwrap();
        let k = |dst: u32, dport: u16, proto: u8| FiveTuple {
            src: 0xC000_0201,
            dst,
            src_port: 5555,
            dst_port: dport,
            proto,
        };
        assert_eq!(c.first_match(&k(0x0A01_0203, 80, 6)), Some(0));
        assert_eq!(c.first_match(&k(0x0A01_0203, 80, 17)), Some(1));
        assert_eq!(c.first_match(&k(0x0A01_0203, 81, 6)), Some(1));
        assert_eq!(c.first_match(&k(0x0B01_0203, 80, 6)), None);
        let small = ClassifierLimits {
            max_rules: 1,
            ..ClassifierLimits::default()
        };
        assert_eq!(
            LinearClassifier::build(&set, &small).unwrap_err(),
            ClassifierBuildError::TooManyRules { rules: 2, max: 1 }
        );
    }
}
