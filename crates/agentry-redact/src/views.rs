//! Decoded views of a text, searched besides the text itself so that JSON
//! escaping cannot hide a secret: JSON inside a JSON string (a model's
//! tool-call arguments, a span attribute, a log field) writes the newline
//! before a secret as `\n`, making its neighbour a letter, and a quote,
//! backslash or non-ASCII character inside it as `\"`, `\\`, `\u00e9`. Each
//! level of unescaping is a view, up to [`MAX_LEVELS`] deep; each text with
//! line breaks also gets a view without them, where an encoding wrapped into
//! lines is whole again.
//!
//! A view knows, for each of its bytes, where it came from in the original
//! text, so a match in a view is replaced in the original: the escapes it
//! covers go with it, the ones around it stay.

/// JSON nested deeper than this inside strings is not unescaped further.
pub(crate) const MAX_LEVELS: usize = 4;

/// One decoded text and where each of its bytes came from.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) text: String,
    /// `origin[i]`: the offset in the original text of the character (or
    /// escape) byte `i` came from; `origin[text.len()]` is the original's length.
    origin: Vec<usize>,
    /// Only line breaks were removed (no escape decoded).
    pub(crate) unwrapped: bool,
}

impl View {
    /// The original offset of the view's offset `at` (a character boundary);
    /// as an end, the end of the escape before it.
    pub(crate) fn source(&self, at: usize) -> usize {
        self.origin.get(at).copied().unwrap_or(at)
    }

    /// Offsets of this view's `origin` re-expressed through `parent`'s.
    fn through(mut self, parent: Option<&View>) -> View {
        if let Some(parent) = parent {
            for o in &mut self.origin {
                *o = parent.source(*o);
            }
        }
        self
    }
}

/// The views of `text` worth searching: each level of JSON unescaping while
/// it changes something, and (when `unwrap`) each text with line breaks
/// without them.
pub(crate) fn views(text: &str, unwrap: bool) -> Vec<View> {
    let mut levels: Vec<View> = Vec::new();
    while levels.len() < MAX_LEVELS {
        let current = levels.last().map_or(text, |v| v.text.as_str());
        if !current.contains('\\') {
            break;
        }
        let Some(next) = unescape(current) else {
            break;
        };
        let next = next.through(levels.last());
        levels.push(next);
    }
    if unwrap {
        let mut wrapped: Vec<View> = Vec::new();
        if let Some(v) = unwrapped(text) {
            wrapped.push(v);
        }
        for level in &levels {
            if let Some(v) = unwrapped(&level.text) {
                wrapped.push(v.through(Some(level)));
            }
        }
        levels.extend(wrapped);
    }
    levels
}

/// `text` with every JSON escape decoded (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`,
/// `\r`, `\t`, `\uXXXX` with surrogate pairs); a backslash starting none of
/// them stays. `None` when nothing was decoded.
fn unescape(text: &str) -> Option<View> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len() + 1);
    let mut changed = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some((c, len)) = escape_at(text, i)
        {
            push(&mut out, &mut origin, c, i);
            changed = true;
            i += len;
            continue;
        }
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        for k in 0..c.len_utf8() {
            origin.push(i + k);
        }
        out.push(c);
        i += c.len_utf8();
    }
    origin.push(text.len());
    changed.then_some(View {
        text: out,
        origin,
        unwrapped: false,
    })
}

fn push(out: &mut String, origin: &mut Vec<usize>, c: char, from: usize) {
    origin.extend(std::iter::repeat_n(from, c.len_utf8()));
    out.push(c);
}

/// The character the escape at `at` (a backslash) stands for, and its length.
fn escape_at(text: &str, at: usize) -> Option<(char, usize)> {
    let c = match text.as_bytes().get(at + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => return unicode_escape(text, at),
        _ => return None,
    };
    Some((c, 2))
}

/// `\uXXXX`, or a surrogate pair `\uD83D\uDE00`; a lone surrogate is no
/// character and stays as written.
fn unicode_escape(text: &str, at: usize) -> Option<(char, usize)> {
    let unit = |from: usize| -> Option<u32> {
        let digits = text.get(from + 2..from + 6)?;
        if !text.get(from..)?.starts_with("\\u") || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(digits, 16).ok()
    };
    let high = unit(at)?;
    if let Some(c) = char::from_u32(high) {
        return Some((c, 6));
    }
    let low = unit(at + 6)?;
    if !(0xD800..0xDC00).contains(&high) || !(0xDC00..0xE000).contains(&low) {
        return None;
    }
    let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?;
    Some((c, 12))
}

/// `text` without `\r` and `\n`; `None` when it has none.
fn unwrapped(text: &str) -> Option<View> {
    if !text.contains(['\n', '\r']) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len() + 1);
    for (i, c) in text.char_indices() {
        if c == '\n' || c == '\r' {
            continue;
        }
        for k in 0..c.len_utf8() {
            origin.push(i + k);
        }
        out.push(c);
    }
    origin.push(text.len());
    Some(View {
        text: out,
        origin,
        unwrapped: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_maps_back_to_the_original() {
        // A JSON string holding JSON holding "a\"é\n" after a newline.
        let text = r#"x\\n\\\"\u00e9/\\\\"#;
        let views = views(text, false);
        let texts: Vec<&str> = views.iter().map(|v| v.text.as_str()).collect();
        assert_eq!(texts, [r#"x\n\"é/\\"#, "x\n\"é/\\"]);
        let deepest = &views[1];
        // The quote at offset 2 of the deepest view came from `\\\"` at 4.
        assert_eq!(deepest.source(2), 4);
        // 'é' (offsets 3..5) came from `\u00e9` at 8; the end maps to 14.
        assert_eq!(deepest.source(3), 8);
        assert_eq!(deepest.source(5), 14);
        assert_eq!(deepest.source(deepest.text.len()), text.len());
    }

    #[test]
    fn surrogate_pairs_and_stray_backslashes() {
        let views = views(r"\ud83d\ude00 C:\dir \ud83d", false);
        assert_eq!(views[0].text, "\u{1F600} C:\\dir \\ud83d");
        assert_eq!(views.len(), 1);
    }

    #[test]
    fn unwrapping_joins_lines() {
        let views = views("QUJD\r\nREVG\nR0g=", true);
        assert_eq!(views.len(), 1);
        assert!(views[0].unwrapped);
        assert_eq!(views[0].text, "QUJDREVGR0g=");
        assert_eq!(views[0].source(4), 6);
    }
}
