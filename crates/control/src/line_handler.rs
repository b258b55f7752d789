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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogCapture;
    use netsched_sys::PeerCred;

    fn answer_logged(handler: &dyn Handler, line: &str) -> (String, String) {
        let out = LogCapture::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let request = Request {
            line,
            peer: PeerCred {
                pid: 4242,
                uid: 1234,
                gid: 1234,
            },
            deadline: Instant::now(),
        };
        let answer = tracing::subscriber::with_default(subscriber, || handler.answer(&request));
        (answer, out.text())
    }

    fn handler() -> OkOrError<impl Fn(&str, Instant) -> Result<String, String>> {
        OkOrError(
            |line: &str, _| match line {
                "show" => Ok("state\n".to_string()),
                "set-x 3" => Ok("x 3\n".to_string()),
                _ => Err(format!("unknown command {line:?}")),
            },
            |verb| verb == "show",
        )
    }

    #[test]
    fn changes_are_logged_with_the_callers_uid_and_reads_are_not() {
        let h = handler();
        let (answer, log) = answer_logged(&h, "set-x 3");
        assert_eq!(answer, "ok\nx 3\n");
        assert!(log.contains("INFO"), "{log}");
        assert!(log.contains("ctl set-x 3 by uid 1234: ok; x 3"), "{log}");
        assert!(log.contains("pid=4242"), "{log}");

        let (answer, log) = answer_logged(&h, "show");
        assert_eq!(answer, "ok\nstate\n");
        assert!(log.is_empty(), "a read-only request was logged: {log}");

        let (answer, log) = answer_logged(&h, "nosuch 1");
        assert_eq!(answer, "error: unknown command \"nosuch 1\"\n");
        assert!(log.contains("WARN"), "{log}");
        assert!(
            log.contains("ctl nosuch 1 by uid 1234 refused: error: unknown command"),
            "{log}"
        );
    }
}
