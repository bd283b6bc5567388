//! Untrusted text made safe to print on a terminal.
//!
//! A model's answer, an MCP server's tool names and descriptions, and what a
//! store or trace holds may carry bytes a terminal obeys: `ESC [2J` clears
//! the screen, `ESC ]` sets the title or a hyperlink, BEL rings, C1 controls
//! (U+0080–U+009F) are escape sequences to some terminals, and the bidi
//! controls (U+202A–U+202E, U+2066–U+2069, and the marks U+200E, U+200F,
//! U+061C) reorder what follows them so a line reads other than it is. Every
//! human-facing output of the CLI passes such text through here; JSON outputs
//! carry it exactly.
//!
//! Each such character is shown as a visible escape: `\n`, `\r`, `\t`, `\x1b`
//! for C0 controls and DEL, `\u{85}` for C1 controls, `\u{202e}` for the bidi
//! controls and U+2028/U+2029 (line and paragraph separators).
//!
//! ```
//! use agentry_protocol::terminal::{escape_line, escape_text};
//! assert_eq!(escape_line("a\x1b[2Jb\u{202e}c\n"), "a\\x1b[2Jb\\u{202e}c\\n");
//! assert_eq!(escape_text("two\nlines\x07"), "two\nlines\\x07");
//! assert_eq!(escape_line("plain"), "plain");
//! ```

use std::borrow::Cow;
use std::fmt::Write;

/// `s` for one line of a terminal: every control character escaped, line
/// breaks and tabs included (a name, an id, a table cell).
pub fn escape_line(s: &str) -> Cow<'_, str> {
    escape(s, Layout::Escaped)
}

/// `s` as lines of a terminal: like [`escape_line`], but `\n` and `\t` are
/// kept (a model's answer, an error message, a rendered tree).
pub fn escape_text(s: &str) -> Cow<'_, str> {
    escape(s, Layout::Kept)
}

/// Whether line breaks and tabs are printed as they are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Escaped,
    Kept,
}

/// Whether a terminal would act on `c` rather than show it.
fn unsafe_char(c: char, layout: Layout) -> bool {
    match c {
        '\n' | '\t' => layout == Layout::Escaped,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{061c}'
        | '\u{2028}'
        | '\u{2029}' => true,
        _ => false,
    }
}

fn escape(s: &str, layout: Layout) -> Cow<'_, str> {
    let Some(first) = s.find(|c| unsafe_char(c, layout)) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !unsafe_char(c, layout) {
            out.push(c);
            continue;
        }
        // Writing to a String cannot fail.
        let _ = match c {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            '\u{0}'..='\u{1f}' | '\u{7f}' => write!(out, "\\x{:02x}", u32::from(c)),
            _ => write!(out, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_are_shown_escaped() {
        let hostile = "ok\x1b[2J\x07\x08\x00\r\x7f\u{85}\u{9b}31m\u{202e}gpj.exe\u{2066}\u{2069}\u{200f}\u{2028}end";
        assert_eq!(
            escape_line(hostile),
            "ok\\x1b[2J\\x07\\x08\\x00\\r\\x7f\\u{85}\\u{9b}31m\\u{202e}gpj.exe\\u{2066}\\u{2069}\\u{200f}\\u{2028}end"
        );
        // Whatever went in, nothing a terminal acts on comes out.
        for layout in [Layout::Escaped, Layout::Kept] {
            let out = escape(hostile, layout);
            assert!(
                !out.chars()
                    .any(|c| unsafe_char(c, Layout::Escaped) && c != '\n' && c != '\t')
            );
        }
    }

    #[test]
    fn line_breaks_and_tabs_are_kept_only_in_text() {
        assert_eq!(escape_line("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(escape_text("a\nb\tc\r\n"), "a\nb\tc\\r\n");
    }

    #[test]
    fn printable_text_is_borrowed_unchanged() {
        for s in ["", "fs.read", "naïve — 日本語 ✓", "a\\x1b is already shown"] {
            assert!(matches!(escape_line(s), Cow::Borrowed(b) if b == s), "{s}");
        }
    }
}
