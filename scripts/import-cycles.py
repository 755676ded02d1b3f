#!/usr/bin/env python3
"""No import circles: lists the `use crate::...` (and crate::/super:: path) edges between the modules
of each crate of the workspace and prints every cycle (strongly connected component); exits 1 when
there is one. `just lint` runs it; `-v` lists the edges."""
import os, re, sys
args = [a for a in sys.argv[1:] if a != '-v']
root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
crates = [d for d in sorted(os.listdir(root)) if os.path.isfile(os.path.join(root, d, 'Cargo.toml')) and os.path.isdir(os.path.join(root, d, 'src'))]

def modules(src):
    mods = {}
    for dp, _, fs in os.walk(src):
        for f in fs:
            if not f.endswith('.rs'): continue
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('mod',): rel = rel[:-1]
            if rel in (['lib'], ['main']): rel = []
            if rel and rel[0] == 'bin': continue
            mods['::'.join(rel)] = p
    return mods

def strip(text):
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    # drop #[cfg(test)] mod tests { ... } blocks (test-only edges are not module structure)
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', text):
        if m.start() < i: continue
        out.append(text[i:m.start()]); depth = 1; j = m.end()
        while j < len(text) and depth:
            depth += {'{': 1, '}': -1}.get(text[j], 0); j += 1
        i = j
    out.append(text[i:])
    return ''.join(out)

def expand(path):
    # expand a::{b, c::{d, e}} into list of paths
    m = re.search(r'\{', path)
    if not m: return [path]
    head = path[:m.start()]
    body = path[m.end():path.rindex('}')]
    parts, depth, cur = [], 0, ''
    for ch in body:
        if ch == ',' and depth == 0: parts.append(cur); cur = ''; continue
        depth += {'{': 1, '}': -1}.get(ch, 0); cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        p = p.strip()
        if not p: continue
        for e in expand(p): res.append(head + e)
    return res

def resolve(segs, mods):
    for k in range(len(segs), -1, -1):
        name = '::'.join(segs[:k])
        if name in mods: return name
    return None

total_cycles = 0
for c in crates:
    src = os.path.join(root, c, 'src')
    mods = modules(src)
    edges = set(); up = set()
    for mod, p in mods.items():
        text = strip(open(p).read())
        paths = []
        for m in re.finditer(r'\buse\s+([^;]+);', text, flags=re.S):
            paths += expand(re.sub(r'\s+', '', m.group(1)))
        for m in re.finditer(r'\b(crate|super)((?:::\w+)+)', text):
            paths.append(m.group(1) + m.group(2))
        me = mod.split('::') if mod else []
        # the module that `super` refers to: parent of file-module
        for path in paths:
            segs = [s for s in re.split(r'::', path) if s]
            segs = [s.split(' as ')[0] for s in segs]
            if segs[0] == 'crate': base = []; segs = segs[1:]
            elif segs[0] == 'super':
                base = me[:]
                while segs and segs[0] == 'super': base = base[:-1]; segs = segs[1:]
            elif segs[0] == 'self': base = me[:]; segs = segs[1:]
            elif '::'.join(me + segs[:1]) in mods: base = me[:]  # a child module named without crate::
            else: continue
            tgt = resolve(base + segs, mods)
            if tgt is None or tgt == mod: continue
            # a parent's mod.rs/lib.rs using its own child, or a child using its ancestor root (lib.rs), is not counted
            if tgt == '' or (tgt and mod.startswith(tgt + '::')):
                up.add((mod, tgt)); continue
            edges.add((mod, tgt))
    # tarjan
    graph = {m: sorted(t for (s, t) in edges if s == m) for m in mods}
    idx, low, st, on, sccs, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in graph[v]:
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(sorted(comp))
    for v in graph:
        if v not in idx: sc(v)
    print(f'{c}: {len(mods)} modules, {len(edges)} edges between modules (+{len(up)} child->ancestor, not counted), {len(sccs)} cycle(s)')
    if '-v' in sys.argv:
        for s, t in sorted(edges): print(f'    {s or "<root>"} -> {t}')
    for comp in sccs:
        total_cycles += 1
        inner = [(s, t) for (s, t) in sorted(edges) if s in comp and t in comp]
        print('  CYCLE: ' + ', '.join(comp))
        for s, t in inner: print(f'    {s} -> {t}')
print(f'total cycles: {total_cycles}')
sys.exit(1 if total_cycles else 0)
