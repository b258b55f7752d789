//! `netsched replay balance` (filled in once the balancers land).

use crate::replay::BalanceReplay;
use anyhow::Result;
use std::io::Write;

pub(crate) fn replay_balance(_a: &BalanceReplay, _out: &mut impl Write) -> Result<()> {
    anyhow::bail!("netsched replay balance: not built yet")
}
