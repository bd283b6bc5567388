#!/usr/bin/env python3
"""No import circle between the modules of one crate.

Usage: modcycles.py SRC_DIR [ROOT_FILE]
  SRC_DIR    a crate's source folder (crates/agentry-tools/src), or tests/
  ROOT_FILE  lib.rs or main.rs (default: lib.rs if present, else main.rs);
             all.rs for tests/

Builds the crate's module graph from `use crate::`/`super::`/`self::` paths,
inline `crate::`/`super::` paths, relative child paths (`inputs::Ticker`), and
names a module re-exports from a child and then uses itself. A `pub use`
re-export is a facade, not a dependency: `crate::fs::WorkRoot` is an edge to the
module that defines `WorkRoot`, not to `fs`. A `mod child;` line is not an edge,
and inline `#[cfg(test)] mod tests { ... }` blocks are skipped. Comments and
literals end where Rust ends them (nested block comments; raw, byte and C
strings; escapes, a `\\`-newline included; char literals beside lifetimes), so
no path inside one counts and none after one is lost (test_modcycles.py).

Prints one line when the graph has no circle; otherwise every circle (a
strongly connected component of more than one module) with the edges that close
it, and exits 1.
"""
import os
import re
import sys
from collections import defaultdict


def modules(src, rootfile):
    """module path (tuple) -> file, for every .rs file under src."""
    mods = {}
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)
            parts = rel[:-3].split(os.sep)
            if rel == rootfile:
                key = ()
            elif parts[-1] == 'mod':
                key = tuple(parts[:-1])
            else:
                key = tuple(parts)
            mods[key] = os.path.join(d, f)
    return mods


# What the code pass looks at, leftmost first; at one position the first
# alternative that matches wins. Identifiers are taken whole, so a word ending
# in `r`, `b` or `c` never reads as a literal's prefix.
TOKEN = re.compile(r"""
    (?P<line>//)
  | (?P<block>/\*)
  | (?P<raw>[bc]?r(?P<hashes>\#*)")
  | (?P<string>[bc]?")
  | (?P<char>b?'(?:\\(?:u\{[0-9A-Fa-f_]{1,8}\}|x[0-9A-Fa-f]{2}|.)|[^\\'\n])')
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
""", re.X)


def string_end(t, i):
    """Where a string literal whose body starts at `i` ends (past its closing
    quote): a backslash escapes the next character, a newline included (a
    `\\`-newline continuation)."""
    n = len(t)
    while i < n:
        if t[i] == '\\':
            i += 2
        elif t[i] == '"':
            return i + 1
        else:
            i += 1
    return n


def block_end(t, i):
    """Where a block comment whose body starts at `i` ends (they nest)."""
    depth, n = 1, len(t)
    while i < n and depth:
        if t.startswith('/*', i):
            depth, i = depth + 1, i + 2
        elif t.startswith('*/', i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i


def strip_literals(t):
    """Rust source with comments removed, every string literal (plain, raw,
    byte, C) as `""` and every char literal as `' '`; lifetimes and labels
    (`'a`) are kept as they are."""
    out, i = [], 0
    while True:
        m = TOKEN.search(t, i)
        if not m:
            out.append(t[i:])
            return ''.join(out)
        out.append(t[i:m.start()])
        if m.group('line') is not None:
            end = t.find('\n', m.end())
            i = len(t) if end < 0 else end
        elif m.group('block') is not None:
            out.append(' ')
            i = block_end(t, m.end())
        elif m.group('raw') is not None:
            close = '"' + m.group('hashes')
            end = t.find(close, m.end())
            out.append('""')
            i = len(t) if end < 0 else end + len(close)
        elif m.group('string') is not None:
            out.append('""')
            i = string_end(t, m.end())
        elif m.group('char') is not None:
            out.append("' '")
            i = m.end()
        else:
            out.append(m.group('ident'))
            i = m.end()


def code_of(path):
    """The file's code: comments, string contents and inline test modules removed."""
    with open(path, encoding='utf-8') as f:
        t = strip_literals(f.read())
    out = []
    i = 0
    while True:
        m = re.search(r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{', t[i:])
        if not m:
            out.append(t[i:])
            break
        s = i + m.start()
        out.append(t[i:s])
        j = i + m.end()
        depth = 1
        while depth and j < len(t):
            depth += {'{': 1, '}': -1}.get(t[j], 0)
            j += 1
        i = j
    return ''.join(out)


REEXPORT = re.compile(
    r'pub(?:\([^)]*\))?\s+use\s+(?:self::)?([a-z_][a-z0-9_]*)::(\{[^}]*\}|[A-Za-z0-9_]+)')


def expand_use(body):
    """'a::{b, c::{d}}' -> ['a::b', 'a::c::d']."""
    body = body.strip()
    m = re.match(r'^(.*?)::\{(.*)\}$', body, re.S)
    if not m:
        return [body]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ''
    for ch in inner:
        if ch == '{':
            depth += 1
        if ch == '}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        if p == 'self':
            res.append(prefix)
            continue
        res += [prefix + '::' + q for q in expand_use(p)]
    return res


def graph(mods, texts):
    """module -> set of modules it depends on."""
    reexps = defaultdict(dict)  # module -> name -> child module defining it
    for k, t in texts.items():
        for m in REEXPORT.finditer(t):
            child = k + (m.group(1),)
            if child in mods:
                for item in re.findall(r'[A-Za-z0-9_]+', m.group(2)):
                    reexps[k][item] = child

    def resolve(cur, path):
        segs = [re.sub(r'\s+as\s+\w+$', '', s.strip()) for s in path.split('::')]
        if segs[0] == 'crate':
            base, segs = (), segs[1:]
        elif segs[0] == 'super':
            base = cur
            while segs and segs[0] == 'super':
                base, segs = base[:-1], segs[1:]
        elif segs[0] == 'self':
            base, segs = cur, segs[1:]
        else:
            return None
        target = base
        for s in segs:
            if target + (s,) in mods:
                target = target + (s,)
            else:
                if s in reexps[target]:
                    target = reexps[target][s]
                break
        return target

    edges = defaultdict(set)
    for cur, t in texts.items():
        paths = []

        def facade(pos, t=t):
            return re.search(r'pub(?:\([^)]*\))?\s+$', t[max(0, pos - 20):pos]) is not None

        for m in re.finditer(r'\buse\s+((?:crate|super|self)(?:::[^;]*)?);', t, re.S):
            if not facade(m.start()):
                paths += expand_use(re.sub(r'\s+', ' ', m.group(1)))
        no_reexports = re.sub(r'pub(?:\([^)]*\))?\s+use\s+[^;]*;', '', t)
        no_uses = re.sub(r'\buse\s+[^;]*;', '', no_reexports)
        for m in re.finditer(r'\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)', no_reexports):
            paths.append(m.group(1))
        for m in re.finditer(r'(?<![:\w])([a-z_][a-z0-9_]*)::', no_uses):
            if cur + (m.group(1),) in mods:
                paths.append('self::' + m.group(1))
        for m in REEXPORT.finditer(t):
            child = m.group(1)
            if cur + (child,) not in mods:
                continue
            for item in re.findall(r'[A-Za-z0-9_]+', m.group(2)):
                if re.search(r'(?<![:\w])' + item + r'\b', no_uses):
                    paths.append('self::' + child)
        for m in re.finditer(r'(?<!pub )(?<!\) )\buse\s+([a-z_][a-z0-9_]*)::', t):
            if cur + (m.group(1),) in mods:
                paths.append('self::' + m.group(1))
        for p in paths:
            target = resolve(cur, p)
            if target is not None and target != cur:
                edges[cur].add(target)
    return edges


def circles(mods, edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(mods):
        if v not in index:
            strong(v)
    return found


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] in ('-h', '--help'):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = os.path.normpath(sys.argv[1])
    if len(sys.argv) == 3:
        rootfile = sys.argv[2]
    else:
        rootfile = 'lib.rs' if os.path.exists(os.path.join(src, 'lib.rs')) else 'main.rs'
    if not os.path.exists(os.path.join(src, rootfile)):
        print(f'modcycles: no {rootfile} in {src}', file=sys.stderr)
        return 2
    mods = modules(src, rootfile)
    texts = {k: code_of(v) for k, v in mods.items()}
    edges = graph(mods, texts)
    found = circles(mods, edges)

    def name(k):
        return '::'.join(k) if k else '(crate root)'

    where = f'{src} ({rootfile})'
    if not found:
        print(f'ok: {where}: {len(mods)} module{"" if len(mods) == 1 else "s"}, no import circle')
        return 0
    for comp in found:
        members = set(comp)
        print(f'CIRCLE in {where}: ' + ', '.join(sorted(name(c) for c in comp)))
        for a in sorted(comp):
            for b in sorted(edges[a] & members):
                print(f'    {name(a)} -> {name(b)}   ({os.path.relpath(mods[a])} names {name(b)})')
    print(f'{where}: {len(found)} import circle(s); break each by moving what both sides '
          'need into a leaf module (a `pub use` in the parent keeps the old paths)')
    return 1


if __name__ == '__main__':
    sys.exit(main())
