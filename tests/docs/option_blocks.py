"""option_blocks.py - the option blocks that docs/ pastes from a binary's
--help (a fenced block whose first line is "usage: BINARY ...") must be
exactly what that binary prints, so they cannot go stale.

  option_blocks.py check  BIN_DIR DOC.md...   exit 1 and a diff if one differs
  option_blocks.py update BIN_DIR DOC.md...   rewrite them from --help
"""
import difflib
import os
import re
import subprocess
import sys

FENCE = "```"


def blocks(lines):
    """(start, end, binary) of each fenced block that opens with 'usage: X':
    lines[start:end] is the block's text between the fences."""
    i = 0
    while i < len(lines):
        if lines[i].strip() == FENCE and i + 1 < len(lines):
            m = re.match(r"usage: (stoker[a-z-]*) ", lines[i + 1])
            j = i + 1
            while j < len(lines) and lines[j].strip() != FENCE:
                j += 1
            if m and j < len(lines):
                yield i + 1, j, m.group(1)
            i = j + 1
        else:
            i += 1


def help_of(bin_dir, name):
    r = subprocess.run([os.path.join(bin_dir, name), "--help"], capture_output=True,
                       text=True, timeout=30)
    return [l.rstrip() for l in r.stdout.rstrip("\n").split("\n")]


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("check", "update"):
        print(__doc__)
        return 2
    mode, bin_dir, docs = sys.argv[1], sys.argv[2], sys.argv[3:]
    bad = found = 0
    for doc in docs:
        with open(doc) as f:
            lines = f.read().split("\n")
        out, last = [], 0
        for start, end, name in blocks(lines):
            found += 1
            want = help_of(bin_dir, name)
            have = [l.rstrip() for l in lines[start:end]]
            out += lines[last:start] + want
            last = end
            if have != want:
                bad += 1
                print("%s: the %s --help block differs from the binary's:" % (doc, name))
                sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(
                    have, want, "docs", "--help", lineterm="", n=1))
        if mode == "update" and out:
            with open(doc, "w") as f:
                f.write("\n".join(out + lines[last:]))
    print("%d option blocks, %d stale%s" % (found, bad, " (rewritten)" if mode == "update"
                                              and bad else ""))
    if mode == "check" and bad:
        print("run: python3 tests/docs/option_blocks.py update BIN_DIR %s" % " ".join(docs))
        return 1
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
