#!/usr/bin/env python3
"""Import cycles between the files of each crate, and oversized files.

For every crate of the workspace (a directory with Cargo.toml and src/), the
files of src/ are nodes; `a -> b` when file a names an item of file b through
`crate::`, `super::` or `self::` paths (in `use` declarations or inline).
Names re-exported by a `mod.rs`/`lib.rs` (`pub use x::Name`) resolve to the
file that defines them. Test code (`tests.rs`, code after `#[cfg(test)]`)
is left out. Prints each cycle and each non-test file over the line limit;
exits 1 if there is any.

    scripts/check-imports.py [--max-lines N] [--quiet] [CRATE_DIR ...]
"""
import os
import re
import sys

MAX_LINES = 800


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        # Drop line comments (naively: not inside strings with //).
        i = line.find("//")
        if i >= 0 and line[:i].count('"') % 2 == 0:
            line = line[:i]
        out.append(line)
    return "\n".join(out)


def strip_strings(text):
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def non_test_part(text):
    # Everything from the first `#[cfg(test)]` on is test code (the
    # project keeps test modules at the end of a file).
    m = re.search(r"#\[cfg\(test\)\]", text)
    return text[: m.start()] if m else text


def module_path(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def is_dir_module(path):
    return os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")


def expand_use(tree):
    """Expands a use tree like `a::{b, c::{d, e}}` into full paths."""
    tree = tree.strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, flags=re.S)
    if not m:
        return [re.sub(r"\s+as\s+\w+$", "", tree).strip()]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        for e in expand_use(p):
            out.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return out


class Crate:
    def __init__(self, root):
        self.root = root
        self.src = os.path.join(root, "src")
        self.files = {}
        for dirpath, _, names in os.walk(self.src):
            for n in names:
                if n.endswith(".rs"):
                    p = os.path.join(dirpath, n)
                    self.files[module_path(self.src, p)] = p
        self.text = {}
        self.exports = {}
        for mod, p in self.files.items():
            with open(p, encoding="utf-8") as f:
                raw = f.read()
            self.text[mod] = strip_strings(strip_comments(raw))
        for mod, p in self.files.items():
            if is_dir_module(p):
                self.exports[mod] = self.reexports(mod)

    def reexports(self, mod):
        names = {}
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", self.text[mod]):
            for full in expand_use(m.group(1)):
                segs = [s for s in full.split("::") if s]
                if not segs:
                    continue
                target = self.resolve_segs(mod, True, segs)
                if target:
                    names[segs[-1]] = target
        return names

    def resolve_segs(self, mod, dir_mod, segs):
        """Module path of the file that `segs` (a path written in `mod`) names."""
        if segs[0] == "crate":
            base = ()
            segs = segs[1:]
        elif segs[0] == "super":
            base = mod
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
        elif segs[0] == "self":
            base = mod
            segs = segs[1:]
        else:
            return None
        cur = base
        for i, s in enumerate(segs):
            nxt = cur + (s,)
            if nxt in self.files:
                cur = nxt
                continue
            # `s` is an item of `cur`: follow a re-export of a directory module.
            exp = self.exports.get(cur)
            if exp and s in exp and exp[s] != cur:
                return exp[s]
            return cur
        return cur

    def edges(self):
        edges = {}
        for mod, p in self.files.items():
            if os.path.basename(p) == "tests.rs" or "tests" in mod:
                continue
            text = non_test_part(self.text[mod])
            dir_mod = is_dir_module(p)
            targets = set()
            for m in re.finditer(r"\buse\s+([^;]+);", text):
                for full in expand_use(m.group(1)):
                    segs = [s for s in full.split("::") if s]
                    if segs and segs[0] in ("crate", "super", "self"):
                        t = self.resolve_segs(mod, dir_mod, segs)
                        if t is not None:
                            targets.add(t)
            for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
                segs = m.group(1).split("::")
                t = self.resolve_segs(mod, dir_mod, segs)
                if t is not None:
                    targets.add(t)
            targets.discard(mod)
            # A directory module naming its own children (mod x; pub use x::..)
            # is the module tree, not a layering arrow.
            if dir_mod:
                targets = {t for t in targets if t[: len(mod)] != mod or len(t) == len(mod)}
            targets = {t for t in targets if t in self.files and "tests" not in t}
            edges[mod] = targets
        return edges


def sccs(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    max_lines, quiet = MAX_LINES, False
    if "--max-lines" in args:
        i = args.index("--max-lines")
        max_lines = int(args[i + 1])
        del args[i : i + 2]
    if "--quiet" in args:
        quiet = True
        args.remove("--quiet")
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not args:
        for base in ("bdev", "jsonrpc", "test", "bench"):
            args.append(os.path.join(top, base))
        for group in ("lib", "modules", "apps"):
            d = os.path.join(top, group)
            if os.path.isdir(d):
                args += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    bad = 0
    for root in args:
        if not os.path.isfile(os.path.join(root, "Cargo.toml")) or not os.path.isdir(
            os.path.join(root, "src")
        ):
            continue
        c = Crate(root)
        e = c.edges()
        name = os.path.relpath(root, top)
        for comp in sccs(sorted(c.files), e):
            bad += 1
            print(f"{name}: import cycle between " + ", ".join(
                os.path.relpath(c.files[m], top) for m in comp))
            for m in comp:
                for t in sorted(e[m] & set(comp)):
                    print(f"    {os.path.relpath(c.files[m], top)} -> {os.path.relpath(c.files[t], top)}")
        for mod, p in sorted(c.files.items()):
            if os.path.basename(p) == "tests.rs" or "tests" in mod:
                continue
            with open(p, encoding="utf-8") as f:
                n = sum(1 for _ in f)
            if n > max_lines:
                bad += 1
                print(f"{os.path.relpath(p, top)}: {n} lines (limit {max_lines})")
        if not quiet and not bad:
            pass
    if bad:
        print(f"check-imports: {bad} problem(s)")
        return 1
    if not quiet:
        print("check-imports: no import cycles, no oversized files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
