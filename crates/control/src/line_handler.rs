//! The handler of a daemon whose requests are one line each and whose answers are `ok`
//! followed by text, or one `error: …` line: the daemon gives the function that runs a line
//! until the request's deadline and which verbs only read, this words the answer and the
//! server's refusals and logs each request that changes state ([`crate::audit`]). The filter
//! and the switch answer so; the balancer words its own.
//!
//! Cost: one call of the daemon's function and one `format!` per request.

use crate::server::{Handler, Refusal, Request};
use std::fmt::Display;
use std::time::Instant;

/// `execute(line, deadline)` answered as `ok\n<text>` or `error: <why>\n`; the second field
/// says whether a request's first word is a verb that only reads (not logged).
pub struct OkOrError<F>(pub F, pub fn(&str) -> bool);

impl<F, E> Handler for OkOrError<F>
where
    F: Fn(&str, Instant) -> Result<String, E> + Send + Sync + 'static,
    E: Display,
{
    fn answer(&self, request: &Request<'_>) -> String {
        let answer = match (self.0)(request.line, request.deadline) {
            Ok(text) => format!("ok\n{text}"),
            Err(e) => format!("error: {e}\n"),
        };
        let verb = request.line.split_whitespace().next().unwrap_or("");
        crate::audit::log_request(request, (self.1)(verb), &answer);
        answer
    }

    fn refusal(&self, why: &Refusal) -> Option<String> {
        Some(format!("error: {why}\n"))
    }
}
