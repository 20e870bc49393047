#!/usr/bin/env python3
"""How a setting travels through strata's source: the figures issue 43 is measured by.

Usage: tools/structure/report.py [SRC_DIR] [--json]

  lines          lines of src/cli and src/train
  long functions function bodies over 80 lines (src/, and in train/ and cli/), found by
                 brace matching: a '{' at namespace or class level after a ')' opens one
  flag files     files that declare a command-line flag (CLI11 add_option / add_flag)
  repeated flags flag names declared in more than one file
  flags below    files outside cli/ and train/ whose string literals spell a flag ("--tp"), and
                 how many of them are in the layers train/ builds on
  include loops  strongly connected sets of more than one module (x.h with x.cc) in the
                 #include graph
"""
import json
import os
import re
import sys
from collections import defaultdict

LONG = 80


def sources(src):
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if f.endswith((".cc", ".h")):
                yield os.path.join(root, f)


def strip(text, keep_strings=False):
    """Text with comments, string and character literals blanked (newlines kept); with
    keep_strings, only the comments."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1] if keep_strings else c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, lines) of each function body at namespace or class level."""
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    found, depth, scopes = [], 0, []  # scopes: per open brace, True if a function body
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            in_function = any(s[0] for s in scopes)
            head = text[max(0, i - 400):i]
            is_fn = False
            if not in_function:
                h = head.rstrip()
                # after ')' possibly followed by qualifiers or an initializer list
                h2 = re.sub(r"(\b(const|override|final|noexcept|mutable)\b|->\s*[\w:<>,*& ]+)\s*$", "", h).rstrip()
                if h2.endswith(")") and not re.search(r"\b(namespace|class|struct|enum|union)\b[^;{}()]*$", h):
                    is_fn = True
                    start = text.count("\n", 0, i)
                    sig = head[head.rfind("\n", 0, len(head) - 1) + 1:].strip() if "\n" in head else head.strip()
            scopes.append((is_fn, start if is_fn else 0, sig if is_fn else ""))
            depth += 1
        elif c == "}":
            if scopes:
                is_fn, start, sig = scopes.pop()
                if is_fn:
                    end = text.count("\n", 0, i)
                    found.append((sig[:80], end - start + 1))
            depth -= 1
        i += 1
    return found


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..", "src")
    src = os.path.normpath(src)
    rel = lambda p: os.path.relpath(p, src)
    files = list(sources(src))

    lines = {d: sum(open(p, encoding="utf-8", errors="replace").read().count("\n")
                    for p in files if rel(p).startswith(d + "/")) for d in ("cli", "train")}

    long_fns = []
    for p in files:
        if p.endswith(".cc") or p.endswith(".h"):
            for name, n in functions(p):
                if n > LONG:
                    long_fns.append((rel(p), name, n))
    long_by = defaultdict(int)
    for f, _, _ in long_fns:
        long_by[f.split("/")[0]] += 1

    flag_re = re.compile(r'add_(?:option|flag)(?:_function<[^>]*>)?\(\s*"(-[-\w,\s]+)"')
    declared = defaultdict(set)
    for p in files:
        for m in flag_re.finditer(open(p, encoding="utf-8", errors="replace").read()):
            for name in re.findall(r"--[\w-]+", m.group(1)):
                declared[name].add(rel(p))
    flag_files = sorted({f for fs in declared.values() for f in fs})
    repeated = sorted(n for n, fs in declared.items() if len(fs) > 1)

    spell_re = re.compile(r'"[^"\n]*(?<![\w-])--[a-z][a-z0-9-]+')
    below = sorted(rel(p) for p in files
                   if rel(p).split("/")[0] not in ("cli", "train")
                   and spell_re.search(strip(open(p, encoding="utf-8", errors="replace").read(), True)))
    # The layers train/ builds on (issue 43: "no flag spelling below train/"); the others hold
    # commands of their own (plan, rlhf, fed, report, launch).
    lower = ("core", "kernels", "comm", "model", "parallel", "data", "ckpt", "cost", "recovery", "diag")
    below_lower = [f for f in below if f.split("/")[0] in lower]

    # The include graph between modules (a header and its source, x.h + x.cc, are one).
    inc_re = re.compile(r'^#include "([^"]+)"', re.M)
    graph = defaultdict(set)
    for p in files:
        mod = os.path.splitext(rel(p))[0]
        for i in inc_re.findall(open(p, encoding="utf-8", errors="replace").read()):
            if os.path.exists(os.path.join(src, i)) and os.path.splitext(i)[0] != mod:
                graph[mod].add(os.path.splitext(i)[0])
    # Tarjan's strongly connected components.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(list(graph)):
        if v not in index:
            visit(v)

    report = {
        "lines": lines,
        "functions_over_80_lines": {"src": len(long_fns), "train": long_by["train"],
                                    "cli": long_by["cli"]},
        "long_functions": [{"file": f, "function": s, "lines": n}
                           for f, s, n in sorted(long_fns, key=lambda x: -x[2])],
        "files_declaring_flags": len(flag_files),
        "flag_names": len(declared),
        "flag_names_declared_in_several_files": len(repeated),
        "repeated_flags": repeated,
        "files_below_train_spelling_a_flag": len(below),
        "below_train": below,
        "files_in_lower_layers_spelling_a_flag": len(below_lower),
        "lower_layers": below_lower,
        "include_loops": comps,
    }
    if "--json" in sys.argv:
        print(json.dumps(report, indent=1))
        return
    print(f"lines: cli/ {lines['cli']}, train/ {lines['train']}")
    print(f"functions over {LONG} lines: src/ {len(long_fns)}, train/ {long_by['train']}, "
          f"cli/ {long_by['cli']}")
    print(f"files declaring a flag: {len(flag_files)}; flag names: {len(declared)}, "
          f"declared in several files: {len(repeated)}")
    print(f"files outside cli/ and train/ spelling a flag: {len(below)}, of them in the layers "
          f"below train/: {len(below_lower)}")
    print(f"include loops: {len(comps)}" + "".join(f"\n  {' -> '.join(c)}" for c in comps))


if __name__ == "__main__":
    main()
