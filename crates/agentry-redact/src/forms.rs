//! The forms a literal secret is searched in, computed once when its set is
//! built: the value itself (any ASCII case: the matcher ignores it; Unicode
//! upper and lower case added), and for values of at least
//! [`MIN_ENCODED`] bytes the cheap encodings a tool applies to what it reads
//! (`base64 /proc/$PPID/environ`): base64 at each of the three alignments in
//! both alphabets, hex, and percent-encoding as the common encoders write it.
//!
//! Also the prefilter's needles for each form: what any JSON escaping of the
//! form still contains, and pieces of an encoded form that survive its output
//! being wrapped into lines (`base64` wraps at 76 columns).

use crate::views::MAX_LEVELS;

/// Encodings are searched only for values this long: shorter ones encode to
/// too few characters to be told from chance (8 bytes give 10 base64
/// characters at every alignment, 16 hex digits).
pub(crate) const MIN_ENCODED: usize = 8;

/// A run of characters no JSON encoder escapes must be this long to stand for
/// a form in the prefilter; shorter, its escaped spellings stand instead.
const MIN_PIECE: usize = 6;

/// Needles for a wrapped encoded form are at most this long (a line of 76
/// characters holds at least two of them whole).
const MAX_CHUNK: usize = 24;

/// How a form must sit in the text to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FormKind {
    /// The value as text: only between token boundaries (`4321` is not
    /// redacted inside `143210`).
    Text,
    /// An encoding: anywhere, since it sits inside a longer encoded run
    /// whose neighbours are of the same alphabet.
    Encoded,
}

/// One searched form of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Form {
    pub(crate) text: String,
    /// Index of the value in its set (`Literals::entries`).
    pub(crate) entry: usize,
    pub(crate) kind: FormKind,
}

/// Every form of `value` (the set's `entry`th), first the value itself; none
/// repeats another (ASCII case aside).
pub(crate) fn forms(value: &str, entry: usize) -> Vec<Form> {
    let mut out: Vec<Form> = Vec::new();
    let mut push = |text: String, kind: FormKind| {
        if !text.is_empty() && !out.iter().any(|f| f.text.eq_ignore_ascii_case(&text)) {
            out.push(Form { text, entry, kind });
        }
    };
    for text in [value.to_owned(), value.to_uppercase(), value.to_lowercase()] {
        push(text, FormKind::Text);
    }
    if value.len() >= MIN_ENCODED {
        let encoded = percent_forms(value)
            .into_iter()
            .chain(base64_forms(value.as_bytes()))
            .chain([hex(value.as_bytes())]);
        for text in encoded {
            push(text, FormKind::Encoded);
        }
    }
    out
}

/// Characters RFC 3986 never percent-encodes.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// Percent-encoding as the common encoders write it: RFC 3986 (Go's
/// `PathEscape`-like, Python's `quote(safe="")`), with `+` for a space (forms,
/// `quote_plus`), JavaScript's `encodeURIComponent`, Python's default
/// `quote` (keeps `/`), `encodeURI` (keeps the reserved set), all but
/// letters and digits, and every byte.
fn percent_forms(value: &str) -> Vec<String> {
    let keeps: [&[u8]; 4] = [b"", b"!'()*", b"/", b";,/?:@&=+$#!'()*"];
    let mut out: Vec<String> = keeps
        .iter()
        .map(|extra| percent(value, |b| unreserved(b) || extra.contains(&b), false))
        .collect();
    out.push(percent(value, unreserved, true));
    out.push(percent(value, |b| b.is_ascii_alphanumeric(), false));
    out.push(percent(value, |_| false, false));
    out
}

fn percent(value: &str, keep: impl Fn(u8) -> bool, plus_for_space: bool) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for &b in value.as_bytes() {
        if keep(b) {
            out.push(char::from(b));
        } else if b == b' ' && plus_for_space {
            out.push('+');
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(b & 15)]));
        }
    }
    out
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Lower-case hex; the matcher ignores ASCII case, so upper-case is found too.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(
            HEX_UPPER[usize::from(b >> 4)].to_ascii_lowercase(),
        ));
        out.push(char::from(
            HEX_UPPER[usize::from(b & 15)].to_ascii_lowercase(),
        ));
    }
    out
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The base64 of `bytes` wherever they sit in what was encoded: with 0, 1
/// and 2 unknown bytes before them, keeping only the characters that depend
/// on `bytes` alone (the first ones mix in the bytes before, the last one
/// the bytes after; padding is dropped with it), in the standard and the
/// URL-safe alphabets.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::with_capacity(6);
    for lead in 0..3usize {
        let mut padded = vec![0u8; lead];
        padded.extend_from_slice(bytes);
        let encoded = base64(&padded);
        let first = (8 * lead).div_ceil(6);
        let last = 8 * (lead + bytes.len()) / 6;
        let Some(stable) = encoded.get(first..last) else {
            continue;
        };
        let url_safe = stable.replace('+', "-").replace('/', "_");
        if url_safe != stable {
            out.push(url_safe);
        }
        out.push(stable.to_owned());
    }
    out
}

/// Standard base64 without padding.
pub(crate) fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=group.len() {
            let index = (n >> (18 - 6 * i)) & 63;
            out.push(char::from(BASE64[index as usize]));
        }
    }
    out
}

/// Whether a JSON encoder may write `c` escaped: the quote and backslash,
/// `/` (some escape it), control and non-ASCII characters, and the HTML ones
/// some escape as `\u003c`.
fn escapable(c: char) -> bool {
    !c.is_ascii() || c.is_ascii_control() || "\"\\/<>&'".contains(c)
}

/// What the prefilter looks for to catch `form`: the form, and, when JSON may
/// write it escaped, its longest run no encoder escapes (present however it
/// is escaped, and at every nesting) or, when that run is short, its escaped
/// spellings at every nesting the views decode (and the longest run of its
/// ASCII-only spelling); for an encoded form, pieces that survive its being
/// wrapped into lines.
pub(crate) fn needles(form: &str, kind: FormKind) -> Vec<String> {
    let mut out = vec![form.to_owned()];
    if form.chars().any(escapable) {
        let longest = longest_plain(form);
        if longest.len() >= MIN_PIECE {
            out.push(longest.to_owned());
        } else {
            for escape in [serde_escape, ascii_escape] {
                let mut spelled = form.to_owned();
                for _ in 0..MAX_LEVELS {
                    spelled = escape(&spelled);
                    out.push(spelled.clone());
                }
            }
            let ascii = ascii_escape(form);
            let longest = longest_plain(&ascii);
            if longest.len() >= MIN_PIECE {
                out.push(longest.to_owned());
            }
        }
    }
    if kind == FormKind::Encoded && form.is_ascii() {
        let size = (form.len() / 2).min(MAX_CHUNK);
        if size >= MIN_ENCODED / 2 {
            out.extend(
                form.as_bytes()
                    .chunks_exact(size)
                    .filter_map(|c| std::str::from_utf8(c).ok())
                    .map(str::to_owned),
            );
        }
    }
    out
}

/// The longest run of `text` no JSON encoder escapes.
fn longest_plain(text: &str) -> &str {
    text.split(escapable)
        .max_by_key(|piece| piece.len())
        .unwrap_or_default()
}

/// `text` inside a JSON string as serde_json writes it.
pub(crate) fn serde_escape(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted
        .get(1..quoted.len().saturating_sub(1))
        .unwrap_or_default()
        .to_owned()
}

/// `text` inside a JSON string as ASCII-only encoders write it (Python's
/// `json.dumps`, PHP's `json_encode`): `\/`, and `\uXXXX` for everything
/// outside printable ASCII.
pub(crate) fn ascii_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_standard_encoding() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    #[test]
    fn each_alignment_keeps_only_what_the_value_decides() {
        // "secret!!" after 0, 1, 2 bytes of anything, and before anything.
        let forms = base64_forms(b"secret!!");
        for before in ["", "a", "ab", "abc", "abcd"] {
            for after in ["", "x", "xy", "xyz"] {
                let whole = base64(format!("{before}secret!!{after}").as_bytes());
                assert!(
                    forms.iter().any(|f| whole.contains(f.as_str())),
                    "{before:?} {after:?}: {whole} holds none of {forms:?}"
                );
            }
        }
        assert!(forms.iter().all(|f| f.len() >= 10), "{forms:?}");
    }

    #[test]
    fn short_values_have_no_encoded_forms() {
        let forms = forms("4321", 3);
        let want = Form {
            text: "4321".to_owned(),
            entry: 3,
            kind: FormKind::Text,
        };
        assert_eq!(forms, vec![want]);
    }
}
