#!/usr/bin/env python3
"""Tests of modcycles.py: small crates written to a temporary folder, checked
by running the script as CI does.

Usage: python3 .ci/test_modcycles.py  (plain unittest; -v for each case)

Each crate has two modules. A circle is found only when the script reads both
edges, so a literal or comment that swallows code hides a circle, and one
whose contents leak in makes a circle up.
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'modcycles.py')

LIB = 'mod a;\nmod b;\n'

# a.rs names b; each case's b.rs decides whether the circle closes.
A_NAMES_B = 'use crate::b::B;\n\npub struct A;\n\npub fn f(_: B) {}\n'


def check(files):
    """modcycles.py's exit code and output over a crate of `files`."""
    with tempfile.TemporaryDirectory() as src:
        for name, text in files.items():
            with open(os.path.join(src, name), 'w', encoding='utf-8') as f:
                f.write(text)
        done = subprocess.run([sys.executable, SCRIPT, src, 'lib.rs'],
                              capture_output=True, text=True, check=False)
        return done.returncode, done.stdout + done.stderr


# What follows a trap in b.rs: b's only edge to a, then a later string, which a
# misread literal pairs its stray quote with, swallowing the edge.
EDGE_THEN_STRING = '\npub fn g() -> crate::a::A {\n    crate::a::A\n}\n\nconst LATER: &str = "later";\n'


class Circles(unittest.TestCase):
    def assert_circle(self, trap):
        b_rs = 'pub struct B;\n\n' + trap + EDGE_THEN_STRING
        code, out = check({'lib.rs': LIB, 'a.rs': A_NAMES_B, 'b.rs': b_rs})
        self.assertEqual(code, 1, b_rs + out)
        self.assertIn(': a, b', out)
        self.assertIn('b -> a', out)

    def assert_no_circle(self, b_rs):
        code, out = check({'lib.rs': LIB, 'a.rs': A_NAMES_B, 'b.rs': b_rs})
        self.assertEqual(code, 0, b_rs + out)
        self.assertIn('no import circle', out)

    def test_a_continuation_inside_a_string_hides_nothing_after_it(self):
        # The case that hid compaction.rs -> openai.rs in agentry-models: a
        # `\`-newline inside a string literal.
        self.assert_circle(
            'pub fn text() -> String {\n'
            '    format!("one line\\n\\\n'
            '             the next")\n'
            '}\n')

    def test_a_comment_marker_inside_a_string_is_text(self):
        self.assert_circle('const URL: &str = "https://example.org/v1";\n')

    def test_raw_strings_end_at_their_own_closing_quote(self):
        self.assert_circle('const RAW: &str = r#"an "odd quote"#;\n')
        self.assert_circle('const RAW_BYTES: &[u8] = br"\\";\n')
        self.assert_circle('const BYTES: &[u8] = b"\\\\";\n')

    def test_char_literals_are_not_string_quotes(self):
        self.assert_circle("const QUOTE: char = '\"';\n")
        self.assert_circle("const BYTE: u8 = b'\"';\n")
        self.assert_circle("const ESCAPED: char = '\\'';\n")

    def test_lifetimes_and_labels_are_not_char_literals(self):
        self.assert_no_circle('pub struct B;\n')
        b_rs = ("pub struct B;\n\n"
                "pub fn g<'a, 'b>(x: &'a crate::a::A, _: &'b str) -> &'a crate::a::A {\n"
                "    'outer: loop { break 'outer x; }\n"
                "}\n")
        code, out = check({'lib.rs': LIB, 'a.rs': A_NAMES_B, 'b.rs': b_rs})
        self.assertEqual(code, 1, b_rs + out)
        self.assertIn('b -> a', out)

    def test_paths_inside_strings_and_comments_are_not_edges(self):
        self.assert_no_circle(
            'pub struct B;\n\n'
            '// crate::a::A in a comment\n'
            '/* a block /* nested */ crate::a::A */\n'
            'const TEXT: &str = "crate::a::A";\n'
            'const RAW: &str = r##"crate::a::A "# still text"##;\n'
            "const C: char = '{';\n")

    def test_a_test_module_is_skipped_up_to_its_own_closing_brace(self):
        tests = ('#[cfg(test)]\n'
                 'mod tests {\n'
                 "    const OPEN: char = '{';\n"
                 '    const TEXT: &str = "}}}";\n'
                 '    use crate::a::A;\n'
                 '}\n')
        self.assert_no_circle('pub struct B;\n\n' + tests)
        self.assert_circle(tests)


if __name__ == '__main__':
    unittest.main()
