#!/usr/bin/env python3
"""mdBook preprocessor: links that leave the book, made to work in its HTML.

The chapters are Markdown files of the repository, and their relative links
are written for it (`../../ARCHITECTURE.md`, `../../examples/embed.rs`), so
they work where the repository is read. In the HTML book such a link has
nothing to point at. This rewrites each link that leaves `src/`:

- to a file the book shows whole as a chapter (`[preprocessor.repo-links.mirrors]`
  in book.toml: repository path = chapter path), a link to that chapter;
- to any other file of the repository, its text alone (the path stays visible);
- to nothing that exists: left as it is, so the link check fails on it.

A mirror chapter holds only `{{#include}}` of its file, so its links are read
relative to that file's place in the repository. Links inside fenced code
blocks are left alone. Runs after mdBook's `links` preprocessor (the includes).
"""

import json
import os
import re
import sys

LINK = re.compile(
    r'(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]'
    r'\(\s*<?(?P<target>[^)\s>]+)>?(?P<title>\s+"[^"]*")?\s*\)'
)
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')
FENCE = re.compile(r'^\s*(```+|~~~+)')


def inside(path, folder):
    return os.path.commonpath([path, folder]) == folder


class Rewriter:
    def __init__(self, context):
        self.root = context["root"]
        config = context["config"]
        self.src = os.path.normpath(
            os.path.join(self.root, config.get("book", {}).get("src", "src"))
        )
        own = config.get("preprocessor", {}).get("repo-links", {})
        self.repo = os.path.normpath(os.path.join(self.root, own.get("repository", "..")))
        self.mirrors = own.get("mirrors", {})
        self.origin_of = {chapter: origin for origin, chapter in self.mirrors.items()}

    def chapter(self, chapter):
        path = chapter.get("source_path") or chapter.get("path")
        if not path:
            return
        here = os.path.dirname(os.path.join(self.src, path))
        origin = self.origin_of.get(path)
        base = os.path.dirname(os.path.join(self.repo, origin)) if origin else here
        chapter["content"] = self.content(chapter["content"], base, here)

    def content(self, text, base, here):
        out, fence = [], None
        for line in text.split("\n"):
            mark = FENCE.match(line)
            if mark and (fence is None or mark.group(1).startswith(fence)):
                fence = mark.group(1)[:3] if fence is None else None
            elif fence is None:
                line = LINK.sub(lambda m: self.link(m, base, here), line)
            out.append(line)
        return "\n".join(out)

    def link(self, match, base, here):
        target = match.group("target")
        if SCHEME.match(target) or target.startswith(("#", "/")):
            return match.group(0)
        path, hash_, fragment = target.partition("#")
        full = os.path.normpath(os.path.join(base, path))
        if inside(full, self.src):
            new = os.path.relpath(full, here)
        elif inside(full, self.repo) and os.path.relpath(full, self.repo) in self.mirrors:
            chapter = self.mirrors[os.path.relpath(full, self.repo)]
            new = os.path.relpath(os.path.join(self.src, chapter), here)
        elif inside(full, self.repo) and os.path.exists(full) and not match.group("bang"):
            text, name = match.group("text"), os.path.relpath(full, self.repo)
            return text if os.path.basename(name) in text else f"{text} (`{name}`)"
        else:
            return match.group(0)
        title = match.group("title") or ""
        return f'{match.group("bang")}[{match.group("text")}]({new}{hash_}{fragment}{title})'


def walk(items, rewriter):
    for item in items:
        if isinstance(item, dict) and "Chapter" in item:
            rewriter.chapter(item["Chapter"])
            walk(item["Chapter"].get("sub_items", []), rewriter)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        sys.exit(0)
    context, book = json.load(sys.stdin)
    walk(book.get("items", book.get("sections", [])), Rewriter(context))
    json.dump(book, sys.stdout)


if __name__ == "__main__":
    main()
