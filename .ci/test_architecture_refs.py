#!/usr/bin/env python3
"""Tests of .ci/architecture-refs.py on small repositories written per test.

Run: python3 .ci/test_architecture_refs.py
"""
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location('refs', os.path.join(HERE, 'architecture-refs.py'))
refs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refs)

# A workspace of two crates: `agentry-a` (a library) and `agentry-b`, whose
# modules are `one`, `two` (uses `one`) and the folder `dir` (`x`, then `y`,
# which uses `x`; `mod` re-exports).
FILES = {
    'crates/agentry-a/Cargo.toml': '''
        [package]
        name = "agentry-a"
        [dependencies]
        serde = "1"
        [dev-dependencies]
        tempfile = "3"
    ''',
    'crates/agentry-a/src/lib.rs': 'pub mod fs;\n',
    'crates/agentry-a/src/fs/mod.rs': 'pub mod root;\n',
    'crates/agentry-a/src/fs/root/mod.rs': '#[test]\nfn a_link_is_refused() {}\n',
    'crates/agentry-b/Cargo.toml': '''
        [package]
        name = "agentry-b"
        [dependencies]
        agentry-a = { path = "../agentry-a" }
        tokio = "1"
    ''',
    'crates/agentry-b/src/lib.rs': 'mod one;\nmod two;\nmod dir;\n',
    'crates/agentry-b/src/one.rs': 'pub(crate) struct One;\n',
    'crates/agentry-b/src/two.rs': 'use crate::one::One;\npub(crate) fn two(_: One) {}\n',
    'crates/agentry-b/src/dir/mod.rs': 'mod x;\nmod y;\npub(crate) use y::Y;\n',
    'crates/agentry-b/src/dir/x.rs': 'pub(crate) struct X;\n',
    'crates/agentry-b/src/dir/y.rs': 'use super::x::X;\npub(crate) struct Y(X);\n',
    'tests/suite/run.rs': '#[test]\nfn a_run_ends_done() {}\n',
    '.ci/run': '',
}

CRATES = '''
    ### Crates

    | crate | what | depends on |
    | --- | --- | --- |
    | `agentry-a` | files (`fs/root/`) | serde |
    | `agentry-b` | the modules (`dir/`, its `x.rs`) | a, tokio (a note, with commas) |
'''

MODULES = '''
    ### `agentry-b/src`, in import order

    | file | holds |
    | --- | --- |
    | `one.rs` | `One` |
    | `two.rs` | `two` |
    | `dir/` | `x` (`X`), `y` (`Y`), `mod` |
    | `lib.rs` | the module list |
'''


class Repo:
    """A repository on disk with FILES, `extra` files and ARCHITECTURE.md."""

    def __init__(self, doc, extra=None, drop=()):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        files = {k: v for k, v in FILES.items() if k not in drop}
        files.update(extra or {})
        files['ARCHITECTURE.md'] = doc
        for path, text in files.items():
            full = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, 'w', encoding='utf-8') as f:
                f.write(textwrap.dedent(text).lstrip('\n'))

    def problems(self):
        """The script's exit status and the problems it reports."""
        out = io.StringIO()
        argv = sys.argv
        sys.argv = ['architecture-refs.py', self.root]
        try:
            with contextlib.redirect_stdout(out):
                status = refs.main()
        finally:
            sys.argv = argv
        return status, [l for l in out.getvalue().splitlines() if l.startswith('MISSING ')]

    def close(self):
        self.tmp.cleanup()


def doc(*parts):
    return '# Architecture\n' + ''.join(textwrap.dedent(p) for p in parts)


class ArchitectureRefsTest(unittest.TestCase):
    def check(self, text, extra=None, drop=()):
        repo = Repo(text, extra, drop)
        self.addCleanup(repo.close)
        return repo.problems()

    def test_a_true_document_passes(self):
        status, problems = self.check(doc(CRATES, MODULES, '''
            - Invariant: runs end. — `run.rs::a_run_ends_done`, `agentry-a/src/fs/root/mod.rs::a_link_is_refused`

            Paths: `crates/agentry-b/src/one.rs`, `agentry-b/src/dir/`, `.ci/run`,
            `tests/suite/run.rs`, `dir/y.rs`, `fs/root/`.
            Not paths: `application/json`, `/proc`, `<tmp>/agentry`, `RunHandle::approve/deny`,
            `agentry::metrics`, `step.rs`, `notifications/cancelled`, `GET /metrics`.
            A test in a file that became a folder: `agentry-a/src/fs/root.rs::a_link_is_refused`.
        '''))
        self.assertEqual(problems, [])
        self.assertEqual(status, 0)

    def test_a_missing_test_is_named(self):
        status, problems = self.check(doc('- Invariant: x. — `run.rs::a_run_never_ends`\n'))
        self.assertEqual(status, 1)
        self.assertEqual(len(problems), 1)
        self.assertIn('no fn or mod a_run_never_ends in tests/suite/run.rs', problems[0])

    def test_a_stale_path_is_named_with_its_line(self):
        status, problems = self.check(doc('''
            Text.
            Resolved beneath a handle (`agentry-a/src/fs/root.rs`); see `crates/agentry-b/src/three.rs`,
            `tests/suite/gone/`, `.ci/nothing.py` and `dir/z.rs`.
        '''))
        self.assertEqual(status, 1)
        self.assertEqual(len(problems), 5, problems)
        self.assertIn('line 4: `agentry-a/src/fs/root.rs`: no file crates/agentry-a/src/fs/root.rs',
                      problems[0])
        for named in ('crates/agentry-b/src/three.rs', 'tests/suite/gone/', '.ci/nothing.py',
                      'dir/z.rs'):
            self.assertTrue(any(named in p for p in problems), (named, problems))

    def test_a_crates_paths_are_resolved_against_its_src(self):
        status, problems = self.check(doc(CRATES.replace('(`fs/root/`)', '(`fs/leaf/`, `root.rs`)')))
        self.assertEqual(status, 1)
        self.assertEqual(len(problems), 2, problems)
        self.assertIn('crate `agentry-a`: `fs/leaf/`: no crates/agentry-a/src/fs/leaf/', problems[0])
        self.assertIn('`root.rs`: no crates/agentry-a/src/root.rs', problems[1])

    def test_a_dependency_list_must_be_the_crates_dependencies(self):
        status, problems = self.check(doc(CRATES.replace('| serde |', '| serde, regex |')
                                          .replace('| a, tokio (a note, with commas) |', '| a |')))
        self.assertEqual(status, 1)
        self.assertEqual(problems, [
            'MISSING line 7: crate `agentry-a`: listed, not in its [dependencies]: regex',
            'MISSING line 8: crate `agentry-b`: depends on, not listed: tokio',
        ])

    def test_an_unknown_crate_is_named(self):
        status, problems = self.check(doc(CRATES.replace('| `agentry-b` |', '| `agentry-c` |')))
        self.assertEqual(status, 1)
        self.assertEqual(problems, ['MISSING line 8: crate `agentry-c`: no crates/agentry-c'])

    def test_a_module_left_out_of_the_module_table_is_named(self):
        status, problems = self.check(
            doc(MODULES.replace('`y` (`Y`), ', '')),
            extra={'crates/agentry-b/src/three.rs': ''})
        self.assertEqual(status, 1)
        self.assertEqual(sorted(problems), [
            'MISSING crates/agentry-b/src/dir/y.rs: not in `dir/`\'s row of the module table',
            'MISSING crates/agentry-b/src/three.rs: not in the module table',
        ])

    def test_a_listed_module_that_is_gone_is_named(self):
        status, problems = self.check(doc(MODULES.replace('`mod` |', '`z`, `mod` |')))
        self.assertEqual(status, 1)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn('`dir/` lists `z`: no crates/agentry-b/src/dir/z.rs', problems[0])

    def test_imports_out_of_table_order_are_named(self):
        swapped = MODULES.replace('| `one.rs` | `One` |\n    | `two.rs` | `two` |',
                                  '| `two.rs` | `two` |\n    | `one.rs` | `One` |')
        swapped = swapped.replace('`x` (`X`), `y` (`Y`)', '`y` (`Y`), `x` (`X`)')
        status, problems = self.check(doc(swapped))
        self.assertEqual(status, 1)
        self.assertEqual(problems, [
            'MISSING crates/agentry-b/src/dir/y: uses dir::x, listed at or after it in the '
            'module table (import order)',
            'MISSING crates/agentry-b/src/two: uses one, listed at or after it in the module '
            'table (import order)',
        ])

    def test_order_is_checked_only_under_an_import_order_heading(self):
        swapped = MODULES.replace('| `one.rs` | `One` |\n    | `two.rs` | `two` |',
                                  '| `two.rs` | `two` |\n    | `one.rs` | `One` |')
        status, problems = self.check(doc(swapped.replace(', in import order', '')))
        self.assertEqual((status, problems), (0, []))


if __name__ == '__main__':
    unittest.main()
