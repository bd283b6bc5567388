#!/usr/bin/env python3
"""No Rust file over 600 lines and no function over 80 lines without a reason.

Usage: sizes.py [REPO_ROOT] [--max-file N] [--max-fn N]

Walks every .rs file under REPO_ROOT (skipping target directories, .git and
node_modules). A file longer than --max-file lines (default 600) passes if one
of its first 10 lines is a `// Size: <reason>` comment; a function longer than
--max-fn lines (default 80, signature line to closing brace, tests included)
passes if a `// Size: <reason>` comment is among its first lines (its
signature, and the three lines after the one that opens its body).

Prints one line per violation and exits 1, or one `ok` line.
"""
import argparse
import os
import re
import sys

SIZE = re.compile(r'^\s*//!?\s*Size:\s*\S')
SKIP_DIRS = {'.git', 'node_modules'}
FILE_REASON_LINES = 10
FN_REASON_LINES = 3

FN = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?'
                r'(?:extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')
IMPL = re.compile(r'^\s*impl(?:<[^>]*>)?\s+(?:[^{]*?\s+for\s+)?([A-Za-z_][A-Za-z0-9_:<>, ]*?)'
                  r'\s*(?:where.*)?\{?\s*$')


def strip(line, state):
    """The line without comments and string contents; `state` carries block
    comments and strings across lines."""
    out = []
    i, n = 0, len(line)
    while i < n:
        if state['block']:
            j = line.find('*/', i)
            if j < 0:
                return ''.join(out)
            state['block'] = False
            i = j + 2
            continue
        if state['raw'] is not None:
            end = '"' + '#' * state['raw']
            j = line.find(end, i)
            if j < 0:
                return ''.join(out)
            state['raw'] = None
            i = j + len(end)
            continue
        if state['str']:
            while i < n:
                if line[i] == '\\':
                    i += 2
                    continue
                if line[i] == '"':
                    state['str'] = False
                    i += 1
                    break
                i += 1
            continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'] = True
            i += 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == '_')):
            state['raw'] = len(m.group(1))
            i += m.end()
            continue
        if c == '"':
            state['str'] = True
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", line[i:])
            if m:
                i += m.end()
                continue
        out.append(c)
        i += 1
    return ''.join(out)


def functions(lines):
    """(first line index, body-opening line index, last line index, Type::name, test)."""
    state = {'block': False, 'raw': None, 'str': False}
    clean = [strip(l, state) for l in lines]
    depth = 0
    impls, open_fns, found = [], [], []
    pending_fn = pending_impl = None
    test_attr = False
    test_mod_depth = None
    for idx, (raw, c) in enumerate(zip(lines, clean)):
        s = raw.strip()
        if re.match(r'#\[(tokio::)?test\b|#\[test\]|proptest!', s):
            test_attr = True
        m = FN.match(c)
        if m and pending_fn is None:
            typ = impls[-1][0] if impls else ''
            pending_fn = (m.group(1), idx, typ, test_attr or test_mod_depth is not None)
            test_attr = False
        mi = IMPL.match(c) if c.lstrip().startswith('impl') else None
        if mi and pending_impl is None:
            pending_impl = mi.group(1).split('<')[0].strip()
        if re.match(r'\s*mod\s+tests\b', c) and test_mod_depth is None:
            test_mod_depth = depth
        for ch in c:
            if ch == '{':
                if pending_fn is not None:
                    open_fns.append((pending_fn, idx, depth))
                    pending_fn = None
                elif pending_impl is not None:
                    impls.append((pending_impl, depth))
                    pending_impl = None
                depth += 1
            elif ch == '}':
                depth -= 1
                if open_fns and open_fns[-1][2] == depth:
                    (name, start, typ, test), body, _ = open_fns.pop()
                    found.append((start, body, idx, (typ + '::' if typ else '') + name, test))
                if impls and impls[-1][1] == depth:
                    impls.pop()
                if test_mod_depth is not None and depth == test_mod_depth:
                    test_mod_depth = None
            elif ch == ';':
                if pending_fn is not None:
                    pending_fn = None  # a trait method without a body
                if pending_impl is not None:
                    pending_impl = None
    return found


def rust_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith('target'))
        for f in sorted(files):
            if f.endswith('.rs'):
                yield os.path.join(d, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('root', nargs='?', default='.')
    parser.add_argument('--max-file', type=int, default=600)
    parser.add_argument('--max-fn', type=int, default=80)
    args = parser.parse_args()

    problems, files, fns = [], 0, 0
    for path in rust_files(args.root):
        rel = os.path.relpath(path, args.root)
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        if lines and lines[-1] == '':
            lines.pop()
        files += 1
        if len(lines) > args.max_file and not any(SIZE.match(l) for l in lines[:FILE_REASON_LINES]):
            problems.append(f'{rel}: {len(lines)} lines (over {args.max_file}): split it, or give a '
                            f'`// Size: <reason>` line in its first {FILE_REASON_LINES} lines')
        for start, body, end, name, test in functions(lines):
            fns += 1
            length = end - start + 1
            if length <= args.max_fn:
                continue
            head = lines[start:body + 1 + FN_REASON_LINES]
            if any(SIZE.match(l) for l in head):
                continue
            kind = 'test fn' if test else 'fn'
            problems.append(f'{rel}:{start + 1}: {kind} {name}: {length} lines (over {args.max_fn}): '
                            'split it, or give a `// Size: <reason>` line at its top')
    for p in problems:
        print(p)
    if problems:
        print(f'sizes: {len(problems)} file(s) or function(s) too long without a reason')
        return 1
    print(f'ok: sizes: {files} files, {fns} functions within {args.max_file}/{args.max_fn} lines '
          'or with a reason')
    return 0


if __name__ == '__main__':
    sys.exit(main())
