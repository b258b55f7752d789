//! Reading examples out of the project's Markdown documents, so a test can feed a document's
//! own example to the parser it documents and the two cannot drift apart.

/// The text of every fenced code block of `markdown` opened with ```` ```lang ````, in order.
pub fn fenced_blocks(markdown: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}");
    let (mut out, mut block) = (Vec::new(), None::<String>);
    for line in markdown.lines() {
        match (block.as_mut(), line.trim()) {
            (None, l) if l == open => block = Some(String::new()),
            (Some(_), "```") => out.extend(block.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blocks_of_the_language_are_returned_whole() {
        let md = "text\n```toml\na = 1\n\nb = 2\n```\n```sh\nls\n```\n```toml\nc = 3\n```\n";
        assert_eq!(fenced_blocks(md, "toml"), ["a = 1\n\nb = 2\n", "c = 3\n"]);
        assert_eq!(fenced_blocks(md, "sh"), ["ls\n"]);
        assert!(fenced_blocks("```toml\nnever closed\n", "toml").is_empty());
    }
}
