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

Exits 0 when every check holds, 1 with each failure named otherwise.
"""
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
    "client/internal.h", "client/wset.h", "client/convert_kernel.h", "wset.h",
    "augment/internal.h", "augment/ops_chain.h", "augment/ops_kernels.h", "augment/decode.h",
    "augment/prof.h", "ops_kernels.h",
    "ops_chain.h", "decode.h", "imgsrc.h", "jpegsrc.h", "prof.h",
    "augment/for_tools/augment/prof.h", "for_tools/augment/prof.h",
    "core/chain.h", "core/internal.h", "chain.h", "core_internal.h",
    "core/for_augment/core/chain.h",
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


def main(argv):
    if len(argv) >= 2 and argv[1] == "symbols" and len(argv) == 5:
        symbols(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "links" and len(argv) == 3:
        links(argv[2])
    elif len(argv) >= 2 and argv[1] == "includes" and len(argv) == 5:
        includes(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "tools" and len(argv) == 5:
        tools(*argv[2:])
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
