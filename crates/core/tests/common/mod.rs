//! Functions shared by the core's integration tests.

/// The bodies of every ```` ```toml ```` block in a doc under `docs/`, so tests can check that
/// each documented configuration parses and builds (docs cannot drift from the code).
pub fn doc_toml_blocks(doc: &str) -> Vec<String> {
    let path = format!("{}/../../docs/{doc}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}
