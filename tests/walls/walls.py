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
    "client/client_internal.h", "client_internal.h", "client/wset.h",
    "client/convert_kernel.h", "wset.h",
    "augment/augment_internal.h", "augment_internal.h", "augment/ops_chain.h",
    "augment/decode.h", "augment/prof.h",
    "ops_chain.h", "decode.h", "imgsrc.h", "jpegsrc.h", "prof.h",
    "core/chain.h", "core/core_internal.h", "chain.h", "core_internal.h",
    "core/for_augment/core/chain.h", "core/for_augment/core/core_internal.h",
    "server/msgcheck.h", "server/worker/worker.h", "server/coordinator/coordinator.h",
    "common/include/common/clock.h",
)
# What the rooms offer each other (and users): these must compile.
INTERFACE = ("stoker/client.h", "stoker/augment.h", "stoker/core.h", "stoker/op.h",
             "common/clock.h", "common/error.h", "augment/megatron.h", "augment/batch.h",
             "rpc.h", "wire.h",
             "msgcheck.h", "gen.h")
PRODUCT_DIRS = ("common", "core", "augment", "proto", "client", "server", "tools", "examples")


def includes(cc, incfile, root):
    with open(incfile) as f:
        dirs = [d for d in f.read().split("\n") if d]
    check(root.rstrip("/") not in [d.rstrip("/") for d in dirs],
          "the source root is on no product library's include path")
    flags = ["-I" + d for d in dirs]
    with tempfile.TemporaryDirectory() as tmp:
        for h in PRIVATE + INTERFACE:
            src = os.path.join(tmp, "probe.c")
            with open(src, "w") as f:
                f.write('#include "%s"\nint walls_probe;\n' % h)
            r = subprocess.run([cc, "-fsyntax-only", "-std=gnu11"] + flags + [src],
                               capture_output=True, text=True, cwd=tmp)
            if h in PRIVATE:
                gone = r.returncode != 0 and "No such file" in r.stderr
                check(gone, "a file outside the room cannot include \"%s\"" % h)
            else:
                check(r.returncode == 0, "\"%s\" compiles from outside its room%s"
                      % (h, "" if r.returncode == 0 else ":\n" + r.stderr[-600:]))
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


def main(argv):
    if len(argv) >= 2 and argv[1] == "symbols" and len(argv) == 5:
        symbols(*argv[2:])
    elif len(argv) >= 2 and argv[1] == "links" and len(argv) == 3:
        links(argv[2])
    elif len(argv) >= 2 and argv[1] == "includes" and len(argv) == 5:
        includes(*argv[2:])
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
