#!/usr/bin/env python3
"""Every test ARCHITECTURE.md names as a guard exists.

Usage: architecture-refs.py [REPO_ROOT]

Reads the `- Invariant:` and `- Deliberately absent:` bullets, the paragraphs
that say "Guarded by", and the `test` column of tables (wrapped lines joined
first), and checks each `file.rs::name` and bare `file.rs` they cite:

- `x.rs` and `suite/x.rs` are `tests/suite/x.rs`; `agentry-NAME/...` is
  `crates/agentry-NAME/...`; `tests/`, `crates/`, `examples/` paths are as
  given, so a unit test is cited as `agentry-runtime/src/x.rs::name` or
  `crates/agentry-runtime/src/x/tests.rs::name`. A file that became a folder
  (`x.rs` -> `x/mod.rs` and siblings) still counts, and its `fn`s are looked
  for in the whole folder.
- `tests::` segments are skipped; a bare `name` after a reference on the same
  bullet is a test in the file of the reference before it.
- Only snake_case names are checked, as a `fn` (a test) or a `mod` (a group of
  tests); a CamelCase item is skipped.

KNOWN_FIXES rewrites a reference that ARCHITECTURE.md still gets wrong to where
the test really is, and says so on every run until the document is fixed.

Prints how many references it checked; exits 1 listing every missing file or
`fn`.
"""
import os
import re
import sys

# Cited path -> where it really is. Remove an entry once ARCHITECTURE.md says it.
KNOWN_FIXES = {
}

REF = re.compile(r'([\w./-]+\.rs)((?:::\w+)*)')


def blocks(doc):
    """(first line number, text) of each checked block, wrapped lines joined."""
    lines = doc.split('\n')
    out = []
    i = 0
    test_column = None  # index of the `test` column of the table being read
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith('|'):
            cells = [c.strip() for c in stripped.strip('|').split('|')]
            if test_column is None and 'test' in cells:
                test_column = cells.index('test')
            elif test_column is not None and len(cells) > test_column \
                    and not set(cells[test_column]) <= set('-: '):
                out.append((i + 1, cells[test_column]))
            i += 1
            continue
        test_column = None
        if stripped.startswith('- '):
            start, text = i, stripped
            i += 1
            # A bullet goes on over indented lines.
            while i < len(lines) and lines[i].startswith('  ') and lines[i].strip():
                text += ' ' + lines[i].strip()
                i += 1
            if text.startswith('- Invariant') or text.startswith('- Deliberately absent'):
                out.append((start + 1, text))
            elif 'Guarded by' in text:
                out.append((start + 1, text[text.index('Guarded by'):]))
            continue
        if stripped and not stripped.startswith('#'):
            start, text = i, stripped
            i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith(('- ', '|', '#')):
                text += ' ' + lines[i].strip()
                i += 1
            if 'Guarded by' in text:
                out.append((start + 1, text[text.index('Guarded by'):]))
            continue
        i += 1
    return out


def resolve(root, cited):
    if cited.startswith('agentry'):
        return os.path.join(root, 'crates', cited)
    if cited.startswith('suite/'):
        return os.path.join(root, 'tests', cited)
    if cited.startswith(('tests/', 'crates/', 'examples/')):
        return os.path.join(root, cited)
    return os.path.join(root, 'tests', 'suite', cited)


def exists(path):
    """The file, or the folder it became."""
    return os.path.exists(path) or os.path.isdir(path[:-3])


def has_fn(path, name):
    paths = [path]
    if os.path.isdir(path[:-3]):
        paths += [os.path.join(d, f) for d, _, fs in os.walk(path[:-3]) for f in fs if f.endswith('.rs')]
    pattern = re.compile(r'\b(?:fn|mod)\s+' + re.escape(name) + r'\b')
    for p in paths:
        if os.path.exists(p):
            with open(p, encoding='utf-8') as f:
                if pattern.search(f.read()):
                    return True
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    with open(os.path.join(root, 'ARCHITECTURE.md'), encoding='utf-8') as f:
        doc = f.read()
    missing, fixed, checked = [], [], 0
    for lineno, text in blocks(doc):
        current = None
        for token in re.findall(r'`([^`]+)`', text):
            m = REF.fullmatch(token)
            if m:
                cited = m.group(1)
                if token in KNOWN_FIXES or cited in KNOWN_FIXES:
                    fix = KNOWN_FIXES.get(token) or KNOWN_FIXES[cited] + m.group(2)
                    fixed.append(f'line {lineno}: `{token}` is `{fix}`')
                    m = REF.fullmatch(fix)
                current = resolve(root, m.group(1))
                names = [s for s in m.group(2).split('::') if s and s != 'tests']
                checked += 1
                shown = os.path.relpath(current, root)
                if not exists(current):
                    missing.append(f'line {lineno}: `{token}`: no file {shown}')
                    current = None
                    continue
                for name in names[-1:]:
                    if re.fullmatch(r'[a-z_][a-z0-9_]*', name) and not has_fn(current, name):
                        missing.append(f'line {lineno}: `{token}`: no fn or mod {name} in {shown}')
            elif current and re.fullmatch(r'[a-z_][a-z0-9_]*', token):
                checked += 1
                if not has_fn(current, token):
                    missing.append(f'line {lineno}: `{token}`: no fn or mod {token} in '
                                   f'{os.path.relpath(current, root)}')
    for note in fixed:
        print(f'known fix, still to make in ARCHITECTURE.md: {note}')
    if missing:
        for m in missing:
            print(f'MISSING {m}')
        print(f'ARCHITECTURE.md: {len(missing)} of {checked} test references point nowhere')
        return 1
    print(f'ok: ARCHITECTURE.md: {checked} test references, all found')
    return 0


if __name__ == '__main__':
    sys.exit(main())
