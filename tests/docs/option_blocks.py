"""option_blocks.py - the option blocks that docs/ pastes from a binary's
--help (a fenced block whose first line is "usage: BINARY ...") must be
exactly what that binary prints, so they cannot go stale.

  option_blocks.py check  BIN_DIR DOC.md...   exit 1 and a diff if one differs
  option_blocks.py update BIN_DIR DOC.md...   rewrite them from --help

Besides the DOC.md files named, every .md of the tree this file is in
(docs/*.md, README.md and the folders' README.md files) is checked, so a
block pasted into any page is covered. A block's binary is looked up in
BIN_DIR, then anywhere in the build tree above it (stoker-train-loop,
stoker-bench, stoker-dataset), then in the source tree's deploy/
(stoker-launch, run with COLUMNS=80 so argparse wraps the same way
everywhere). "usage: BINARY WORD ..." with a lower-case WORD is that
subcommand's --help (`stoker status`, `stoker-bench augment`). A block
whose binary is not found counts as stale.
"""
import difflib
import os
import re
import subprocess
import sys

FENCE = "```"
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP_DIRS = {".git", "CMakeFiles", "corpus", "node_modules"}


def blocks(lines):
    """(start, end, binary, subcommand or None) of each fenced block that
    opens with 'usage: X': lines[start:end] is the block's text between the
    fences."""
    i = 0
    while i < len(lines):
        if lines[i].strip() == FENCE and i + 1 < len(lines):
            m = re.match(r"usage: (stoker[a-z-]*) (\S+)", lines[i + 1])
            j = i + 1
            while j < len(lines) and lines[j].strip() != FENCE:
                j += 1
            if m and j < len(lines):
                sub = m.group(2) if re.fullmatch(r"[a-z][a-z-]*", m.group(2)) else None
                yield i + 1, j, m.group(1), sub
            i = j + 1
        else:
            i += 1


def tree_docs():
    """Every .md of the source tree: docs/*.md, README.md, */README.md ...
    (not under build trees, which hold no .md of ours)."""
    out = []
    for root, dirs, files in os.walk(SRC):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS
                         and not os.path.exists(os.path.join(root, d, "CMakeCache.txt"))
                         and not (root == SRC and d.startswith("build")))
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".md")]
    return out


def find_binary(bin_dir, name):
    """BIN_DIR/name, else the first executable of that name in the build
    tree above BIN_DIR, else SRC/deploy/name; None if nowhere."""
    cand = os.path.join(bin_dir, name)
    if os.access(cand, os.X_OK) and os.path.isfile(cand):
        return cand
    build = bin_dir
    while build != os.path.dirname(build) and not os.path.exists(
            os.path.join(build, "CMakeCache.txt")):
        build = os.path.dirname(build)
    if os.path.exists(os.path.join(build, "CMakeCache.txt")):
        for root, dirs, files in os.walk(build):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            cand = os.path.join(root, name)
            if name in files and os.access(cand, os.X_OK):
                return cand
    cand = os.path.join(SRC, "deploy", name)
    if os.path.isfile(cand):
        return cand
    return None


def help_of(bin_dir, name, sub):
    path = find_binary(bin_dir, name)
    if path is None:
        return None
    argv = [path] + ([sub] if sub else []) + ["--help"]
    if path.endswith(os.path.join("deploy", name)) and not os.access(path, os.X_OK):
        argv = [sys.executable] + argv
    env = dict(os.environ, COLUMNS="80")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    return [l.rstrip() for l in r.stdout.rstrip("\n").split("\n")]


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("check", "update"):
        print(__doc__)
        return 2
    mode, bin_dir, named = sys.argv[1], sys.argv[2], sys.argv[3:]
    docs, seen = [], set()
    for doc in named + tree_docs():
        if os.path.realpath(doc) not in seen:
            seen.add(os.path.realpath(doc))
            docs.append(doc)
    bad = found = 0
    for doc in docs:
        with open(doc) as f:
            lines = f.read().split("\n")
        out, last = [], 0
        for start, end, name, sub in blocks(lines):
            found += 1
            want = help_of(bin_dir, name, sub)
            have = [l.rstrip() for l in lines[start:end]]
            if want is None:
                bad += 1
                print("%s: no %s binary in %s, its build tree or deploy/" % (doc, name, bin_dir))
                want = have
            out += lines[last:start] + want
            last = end
            if have != want:
                bad += 1
                print("%s: the %s --help block differs from the binary's:" %
                      (doc, name + (" " + sub if sub else "")))
                sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(
                    have, want, "docs", "--help", lineterm="", n=1))
        if mode == "update" and out:
            with open(doc, "w") as f:
                f.write("\n".join(out + lines[last:]))
    print("%d option blocks, %d stale%s" % (found, bad, " (rewritten)" if mode == "update"
                                              and bad else ""))
    if mode == "check" and bad:
        print("run: python3 tests/docs/option_blocks.py update BIN_DIR %s" % " ".join(named))
        return 1
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
