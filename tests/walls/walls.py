#!/usr/bin/python3
"""walls.py - the rooms' walls, checked against the build (tests/walls/).

  walls.py symbols LIBSTOKER LIBSTOKER_AUGMENT INCLUDE_DIR
      libstoker.so exports exactly what include/stoker/client.h declares
      STK_EXPORT, libstoker-augment.so exactly what stoker/core.h,
      stoker/augment.h and stoker/status.h declare: the two sets are
      disjoint (libstoker re-exports nothing of libstoker-augment's).
  walls.py links BIN_DIR
      stoker-coordinator and stoker (the CLI) are linked without augment
      and the image libraries: their link maps (<program>.map, written by
      server/CMakeLists.txt) load no libstoker_augment.a, libjpeg, libpng,
      libturbojpeg or liburing, and readelf -d lists none of them as
      NEEDED. stoker-worker's map does load augment (the check can see).
  walls.py includes CC INCLUDES_FILE SOURCE_ROOT
      a file outside a room cannot include that room's private headers:
      compiled with the include path of everything the product's
      libraries export (INCLUDES_FILE, written by CMake from the target
      walls_consumer), each private header fails with "No such file",
      each in-tree interface header compiles; and no source file of the
      product reaches a header by a relative path ("../").
  walls.py tools CC INCLUDES_FILE SOURCE_ROOT
      an installed tool (stoker-bench: INCLUDES_FILE is its include path,
      written by CMake) is built without the tests' private path: neither
      the source root, nor tests/, nor augment/ itself is on it; of the
      private headers it reaches only augment/prof.h (through
      stoker_augment_for_tools), every other one fails with "No such
      file".
  walls.py names SOURCE_ROOT [CC [BUILD_DIR]]
      names that find their file: no two .c/.h files of the tree share a
      basename, and no header shadows a system header. The files are the
      tracked ones (git ls-files) when SOURCE_ROOT is the top of a git
      checkout, else every file under it (hidden folders, build trees and
      BUILD_DIR left out). A header's names are the ones the tree's
      #include lines reach it by ("daemon_log.h", "common/error.h"; its
      basename if none does); it shadows a system header when one of
      them is a file in a system include folder: /usr/include, its
      multiarch folder, and CC's own search list when CC is given.
  walls.py names-selftest [CC]
      the names check on small trees it makes: one walked (a shared
      basename, a shadowing header, a build tree and a hidden folder) and
      one a git checkout (untracked files not counted).

Exits 0 when every check holds, 1 with each failure named otherwise.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRVW":
            syms.add(parts[2].split("@")[0])
    return syms


def declared(headers):
    names = set()
    for h in headers:
        with open(h) as f:
            text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
        for m in re.finditer(r"^\s*STK_EXPORT\b([^;{]*?)\b(\w+)\s*\(", text, re.M):
            names.add(m.group(2))
    return names


def symbols(libstoker, libaug, inc):
    client = exported(libstoker)
    aug = exported(libaug)
    want_client = declared([os.path.join(inc, "stoker", "client.h")])
    want_aug = declared([os.path.join(inc, "stoker", h)
                         for h in ("core.h", "augment.h", "status.h")])
    both = sorted(client & aug)
    check(not both, "libstoker.so and libstoker-augment.so export disjoint symbols"
          + ("" if not both else " (both: %s)" % " ".join(both)))
    for lib, got, want in (("libstoker.so", client, want_client),
                           ("libstoker-augment.so", aug, want_aug)):
        extra, missing = sorted(got - want), sorted(want - got)
        check(not extra, "%s exports only its public headers' STK_EXPORT functions%s"
              % (lib, "" if not extra else " (also: %s)" % " ".join(extra)))
        check(not missing, "%s exports every STK_EXPORT function of its headers%s"
              % (lib, "" if not missing else " (missing: %s)" % " ".join(missing)))


IMAGE_LIBS = re.compile(r"libstoker_augment\.a|libstoker-augment|libjpeg|libturbojpeg|"
                        r"libpng|liburing")


def links(bindir):
    for prog, lean in (("stoker-coordinator", True), ("stoker", True),
                       ("stoker-worker", False)):
        path = os.path.join(bindir, prog)
        with open(path + ".map") as f:
            loads = [l.split()[1] for l in f if l.startswith("LOAD ")]
        image = [l for l in loads if IMAGE_LIBS.search(os.path.basename(l))]
        if lean:
            check(not image, "%s is linked without augment and the image libraries%s"
                  % (prog, "" if not image else " (its link loads %s)" % " ".join(image)))
            dyn = subprocess.run(["readelf", "-d", path], check=True,
                                 capture_output=True, text=True).stdout
            needed = [l for l in dyn.splitlines() if "(NEEDED)" in l and IMAGE_LIBS.search(l)]
            check(not needed, "%s needs no image library at run time%s"
                  % (prog, "" if not needed else ": " + "; ".join(needed)))
        else:
            check(any("libstoker_augment.a" in l for l in loads),
                  "%s's link map shows augment (the map check sees a linked library)" % prog)


# Each room's private headers, by every name a file elsewhere might try.
PRIVATE = (
    "client/client_internal.h", "client_internal.h", "client/wset.h",
    "client/convert_kernel.h", "wset.h",
    "augment/augment_internal.h", "augment_internal.h", "augment/ops_chain.h",
    "augment/ops_kernels.h", "augment/decode.h", "augment/prof.h", "ops_kernels.h",
    "ops_chain.h", "decode.h", "imgsrc.h", "jpegsrc.h", "prof.h",
    "augment/for_tools/augment/prof.h", "for_tools/augment/prof.h",
    "core/chain.h", "core/core_internal.h", "chain.h", "core_internal.h",
    "core/for_augment/core/chain.h", "core/for_augment/core/core_internal.h",
    "server/msgcheck.h", "server/worker/worker.h", "server/coordinator/coordinator.h",
    "common/include/common/clock.h",
    "rpc_tsan.h", "rpc/rpc_tsan.h", "server_internal.h", "rpc/server_internal.h",
    "rpc/include/rpc/rpc.h",
)
# What the rooms offer each other (and users): these must compile.
INTERFACE = ("stoker/client.h", "stoker/augment.h", "stoker/core.h", "stoker/op.h",
             "common/clock.h", "common/error.h", "augment/megatron.h", "augment/batch.h",
             "rpc/rpc.h", "rpc/wire.h", "rpc/wire_limits.h", "rpc/peer.h", "rpc/ticket.h",
             "rpc/tls.h", "rpc/memtune.h", "stoker.pb-c.h", "health.pb-c.h",
             "msgcheck.h", "gen.h")
PRODUCT_DIRS = ("common", "core", "augment", "proto", "rpc", "client", "server", "tools", "examples")


def read_dirs(incfile):
    with open(incfile) as f:
        return [d for d in f.read().split("\n") if d]


def probe(cc, dirs, private, reachable, who):
    """Compile a one-line file including each header with -I dirs: each
    of private must fail with "No such file", each of reachable compile."""
    flags = ["-I" + d for d in dirs]
    with tempfile.TemporaryDirectory() as tmp:
        for h in private + reachable:
            src = os.path.join(tmp, "probe.c")
            with open(src, "w") as f:
                f.write('#include "%s"\nint walls_probe;\n' % h)
            r = subprocess.run([cc, "-fsyntax-only", "-std=gnu11"] + flags + [src],
                               capture_output=True, text=True, cwd=tmp)
            if h in private:
                gone = r.returncode != 0 and "No such file" in r.stderr
                check(gone, "%s cannot include \"%s\"" % (who, h))
            else:
                check(r.returncode == 0, "\"%s\" compiles in %s%s"
                      % (h, who, "" if r.returncode == 0 else ":\n" + r.stderr[-600:]))


def includes(cc, incfile, root):
    dirs = read_dirs(incfile)
    check(root.rstrip("/") not in [d.rstrip("/") for d in dirs],
          "the source root is on no product library's include path")
    probe(cc, dirs, PRIVATE, INTERFACE, "a file outside the room")
    rel = []
    for d in PRODUCT_DIRS:
        for base, _, files in os.walk(os.path.join(root, d)):
            for n in files:
                if n.endswith((".c", ".h", ".cu")):
                    p = os.path.join(base, n)
                    with open(p, errors="replace") as f:
                        for i, line in enumerate(f, 1):
                            if re.match(r'\s*#\s*include\s*"\.\./', line):
                                rel.append("%s:%d" % (os.path.relpath(p, root), i))
    check(not rel, "no product file includes by a relative path%s"
          % ("" if not rel else " (%s)" % ", ".join(rel)))


# What tools/bench may include beyond the public and tools/ headers.
FOR_TOOLS = ("augment/prof.h",)


def tools(cc, incfile, root):
    dirs = [os.path.realpath(d) for d in read_dirs(incfile)]
    root = os.path.realpath(root)
    bad = [d for d in dirs if d == root or d == os.path.join(root, "augment")
           or d.startswith(os.path.join(root, "tests") + os.sep)
           or d == os.path.join(root, "tests")]
    check(not bad, "stoker-bench's include path holds neither the source root, tests/ "
          "nor augment/%s" % ("" if not bad else " (it holds %s)" % " ".join(bad)))
    private = tuple(h for h in PRIVATE if h not in FOR_TOOLS)
    probe(cc, dirs, private, FOR_TOOLS, "stoker-bench")


def source_files(root, skip):
    """The tree's files, relative to root, and how they were listed:
    git ls-files when root is the top of a git checkout, a walk otherwise."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True)
        if top.returncode == 0 and os.path.samefile(top.stdout.strip(), root):
            ls = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                                capture_output=True, text=True).stdout
            # a path in conflict is listed once per stage: once here
            files = sorted({p for p in ls.split("\0")
                            if p and os.path.isfile(os.path.join(root, p))})
            return files, "git ls-files"
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for base, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not os.path.exists(os.path.join(base, d, "CMakeCache.txt"))
                         and not (skip and os.path.realpath(os.path.join(base, d)) == skip))
        files += [os.path.relpath(os.path.join(base, n), root) for n in names]
    return files, "a walk of the source tree"


def system_include_dirs(cc):
    dirs = ["/usr/include", "/usr/local/include"]
    try:
        arch = subprocess.run([cc or "cc", "-print-multiarch"], capture_output=True,
                              text=True).stdout.strip()
        if arch:
            dirs.append(os.path.join("/usr/include", arch))
    except OSError:
        pass
    if cc:
        err = subprocess.run([cc, "-xc", "-E", "-v", "-"], input="", capture_output=True,
                             text=True).stderr
        inside = False
        for line in err.splitlines():
            if line.startswith("#include <...> search starts here"):
                inside = True
            elif line.startswith("End of search list"):
                inside = False
            elif inside and line.startswith(" "):
                dirs.append(os.path.normpath(line.strip()))
    seen = []
    for d in dirs:
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
    return seen


INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def name_findings(root, cc=None, builddir=None):
    """What the names check finds in the tree at root: a dict with the
    number of .c/.h files, how they were listed, the basenames shared
    ("x.c (a/x.c, b/x.c)"), the headers shadowing a system header and
    the system folders searched."""
    root = os.path.realpath(root)
    skip = os.path.realpath(builddir) if builddir else None
    files, how = source_files(root, skip)
    code = sorted(p for p in files if p.endswith((".c", ".h")))
    by_base = collections.defaultdict(list)
    for p in code:
        by_base[os.path.basename(p)].append(p)
    same = ["%s (%s)" % (b, ", ".join(ps)) for b, ps in sorted(by_base.items()) if len(ps) > 1]
    headers = [p for p in code if p.endswith(".h")]
    reached = {h: set() for h in headers}
    for p in files:
        if not p.endswith((".c", ".h", ".cu")):
            continue
        with open(os.path.join(root, p), errors="replace") as f:
            text = f.read()
        for m in INCLUDE_LINE.finditer(text):
            name = os.path.normpath(m.group(1))
            for h in by_base.get(os.path.basename(name), []):
                if h.endswith(".h") and ("/" + h).endswith("/" + name):
                    reached[h].add(name)
    sysdirs = system_include_dirs(cc)
    shadow = []
    for h in headers:
        for name in sorted(reached[h] or {os.path.basename(h)}):
            hits = [os.path.join(d, name) for d in sysdirs
                    if os.path.isfile(os.path.join(d, name))]
            if hits:
                shadow.append("%s as \"%s\" (%s)" % (h, name, ", ".join(hits)))
    return {"count": len(code), "how": how, "same": same, "shadow": shadow,
            "sysdirs": sysdirs}


def names(root, cc=None, builddir=None):
    f = name_findings(root, cc, builddir)
    check(f["count"] > 0, "the tree has .c/.h files (%d, from %s)" % (f["count"], f["how"]))
    check(not f["same"], "every .c/.h basename is unique%s"
          % ("" if not f["same"] else "; shared: " + "; ".join(f["same"])))
    check(not f["shadow"], "no header shadows a system header (searched %s)%s"
          % (" ".join(f["sysdirs"]), "" if not f["shadow"]
             else "; shadowing: " + "; ".join(f["shadow"])))


def names_selftest(cc=None):
    """The names check on small trees made here: a walked one (no git)
    with a shared basename, a shadowing header, a namespaced header named
    like a system one, a build tree and a hidden folder; and, when git
    runs, a git checkout whose untracked files are not counted."""
    sysname = next((n for n in ("sched.h", "stdio.h", "stddef.h")
                    if any(os.path.isfile(os.path.join(d, n))
                           for d in system_include_dirs(cc))), None)
    files = {
        "a/x.c": '#include "a/error.h"\n',
        "b/x.c": "",
        "a/include/a/error.h": "",
        "build/CMakeCache.txt": "",
        "build/y.c": "",
        ".hidden/y.c": "",
    }
    if sysname:
        files["c/%s" % sysname] = ""
        files["c/y.c"] = '#include "%s"\n' % sysname
    with tempfile.TemporaryDirectory() as tmp:
        for p, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, p)), exist_ok=True)
            with open(os.path.join(tmp, p), "w") as f:
                f.write(text)
        f = name_findings(tmp, cc)
        check(f["how"] == "a walk of the source tree" and f["same"] == ["x.c (a/x.c, b/x.c)"],
              "a walk finds the shared basename x.c and nothing in build trees or hidden "
              "folders (found: %s, by %s)" % (f["same"], f["how"]))
        want = ["c/%s as \"%s\"" % (sysname, sysname)] if sysname else []
        got = [s.split(" (")[0] for s in f["shadow"]]
        check(got == want, "a walk finds the shadowing header %s, not a/error.h reached as "
              "\"a/error.h\" (found: %s)" % (want, f["shadow"]))
    try:
        subprocess.run(["git", "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        print("skip: git does not run here, the git ls-files half is not tried")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for p in ("a/x.c", "b/y.c", "b/x.c"):
            os.makedirs(os.path.dirname(os.path.join(tmp, p)), exist_ok=True)
            open(os.path.join(tmp, p), "w").close()
        for args in (["init", "-q"], ["add", "a/x.c", "b/y.c"]):
            subprocess.run(["git", "-C", tmp] + args, check=True, capture_output=True)
        f = name_findings(tmp, cc)
        check(f["how"] == "git ls-files" and f["count"] == 2 and not f["same"],
              "a git checkout counts its tracked files only (%d by %s, shared: %s)"
              % (f["count"], f["how"], f["same"]))


def main(argv):
    if len(argv) >= 2 and argv[1] == "symbols" and len(argv) == 5:
        symbols(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "links" and len(argv) == 3:
        links(argv[2])
    elif len(argv) >= 2 and argv[1] == "includes" and len(argv) == 5:
        includes(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "tools" and len(argv) == 5:
        tools(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "names" and 3 <= len(argv) <= 5:
        names(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "names-selftest" and len(argv) <= 3:
        names_selftest(*argv[2:])
    else:
        sys.stderr.write(__doc__)
        return 2
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("walls.py %s: every check holds" % argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
