#!/usr/bin/python3
"""wheel.py - writes the stoker wheel from a `cmake --install` prefix
(scripts/wheel.sh calls it; see there for the usage most people want).

What goes in (paths inside the wheel, which pip puts in site-packages):
  stoker/            the Python package (client/python/stoker) and
                     libstoker, named by its SONAME, where stoker._lib
                     looks for the package's own copy
  stoker_bin/        stoker-coordinator, stoker-worker, stoker,
                     stoker-dataset (ELF) and stoker-launch (Python),
                     and the console entry
                     functions that exec them (client/python/stoker_bin)
  stoker.libs/       every shared library those ELF files load, found
                     with ldd (gRPC, abseil, protobuf-c, libjpeg-turbo,
                     liburing, OpenSSL, ...), except the system's (SYSTEM
                     below: glibc's own, libstdc++, libgcc_s)
  stoker-V.dist-info/  METADATA, WHEEL, entry_points.txt, top_level.txt,
                     RECORD (sha256 of every file, as the wheel spec says)

Each ELF file's RUNPATH is set with patchelf to the $ORIGIN-relative
folders that hold what it needs (stoker.libs: `$ORIGIN`; libstoker and the
programs: `$ORIGIN/../stoker.libs`), so nothing needs LD_LIBRARY_PATH.
Then libstoker and the programs are checked with ldd: each library they
load but SYSTEM's must resolve inside the wheel's tree, or no wheel is
written.

Standard library only (no setuptools, wheel or build: PyPI is not needed).
Writes only under --work and --out.
"""
import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
import zipfile

NAME = "stoker"
PROGRAMS = ("stoker-coordinator", "stoker-worker", "stoker", "stoker-dataset")
LAUNCHER = "stoker-launch"
ENTRY_POINTS = (
    ("stoker-coordinator", "stoker_bin:coordinator"),
    ("stoker-worker", "stoker_bin:worker"),
    ("stoker", "stoker_bin:cli"),
    ("stoker-dataset", "stoker_bin:dataset"),
    ("stoker-launch", "stoker_bin:launch"),
)
LIBS = "stoker.libs"
# Never bundled: glibc's own libraries (every Linux system has them, built
# to match its ld.so), and GCC's C++ runtime, libstdc++ and libgcc_s, which
# every image that has apt or torch has too. A bundled libstdc++ would
# raise the floor: bookworm's needs glibc 2.36, while the rest of the
# wheel needs 2.34 and GLIBCXX_3.4.29 (GCC 11), which Ubuntu 22.04's
# framework images (SageMaker) have; and in a training process torch has
# loaded the system's libstdc++ already, which the loader would use anyway.
SYSTEM = re.compile(r"^(ld-linux[^/]*|linux-vdso|linux-gate|libc|libm|libpthread|libdl|librt"
                    r"|libresolv|libutil|libanl|libmvec|libnsl|libBrokenLocale|libthread_db"
                    r"|libnss_[a-z0-9_]+|libstdc\+\+|libgcc_s)\.so(\.[0-9.]+)?$")
SUMMARY = ("Distributed data loading for PyTorch: CPU hosts decode and augment, "
           "training hosts receive ready batches over gRPC")


def die(msg):
    sys.stderr.write("wheel.py: %s\n" % msg)
    sys.exit(1)


def run(argv):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        die("%s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return p.stdout


def ldd(path):
    """{soname: resolved path} of everything `path` loads (the closure)."""
    deps = {}
    for line in run(["ldd", path]).splitlines():
        m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
        if not m:
            continue
        name, where = m.groups()
        if where == "not found":
            die("%s needs %s, which is not found" % (path, name))
        deps[name] = where
    return deps


def needed(path):
    return run(["patchelf", "--print-needed", path]).split()


def soname(path):
    return run(["patchelf", "--print-soname", path]).strip()


def find_one(prefix, pattern):
    for d, _, files in os.walk(prefix):
        for f in sorted(files):
            if re.fullmatch(pattern, f) and not os.path.islink(os.path.join(d, f)):
                return os.path.join(d, f)
    die("no %s under %s" % (pattern, prefix))


def project_version(prefix):
    pc = find_one(prefix, r"stoker\.pc")
    with open(pc) as f:
        for line in f:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    die("no Version: in %s" % pc)


def platform_tag():
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def copy(src, dst, mode):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, mode)


def stage(args, root):
    """Fills root with the wheel's files; returns the number of bundled libraries."""
    prefix = args.prefix
    for pkg in ("stoker", "stoker_bin"):
        src = os.path.join(args.python_src, pkg)
        for f in sorted(os.listdir(src)):
            if f.endswith(".py") and f != "_installed.py":
                copy(os.path.join(src, f), os.path.join(root, pkg, f), 0o644)
    libstoker = find_one(prefix, r"libstoker\.so\.[0-9]+\.[0-9]+\.[0-9]+")
    own = soname(libstoker)
    elves = {os.path.join(root, NAME, own): libstoker}
    for p in PROGRAMS:
        elves[os.path.join(root, "stoker_bin", p)] = find_one(prefix, re.escape(p))
    copy(find_one(prefix, re.escape(LAUNCHER)), os.path.join(root, "stoker_bin", LAUNCHER), 0o755)

    bundle = {}  # soname -> the system's file
    for src in elves.values():
        for name, where in ldd(src).items():
            if SYSTEM.match(name) or name == own:
                continue
            real = os.path.realpath(where)
            if bundle.setdefault(name, real) != real:
                die("%s resolves to both %s and %s" % (name, bundle[name], real))
    for dst, src in elves.items():
        copy(src, dst, 0o755)
    tops = list(elves)
    for name, src in bundle.items():
        dst = os.path.join(root, LIBS, name)
        copy(src, dst, 0o644)
        elves[dst] = src

    where = {own: os.path.join(root, NAME)}
    where.update({n: os.path.join(root, LIBS) for n in bundle})
    for dst in elves:
        dirs = []
        for n in needed(dst):
            if n in where:
                rel = os.path.relpath(where[n], os.path.dirname(dst))
                d = "$ORIGIN" if rel == "." else "$ORIGIN/" + rel
                if d not in dirs:
                    dirs.append(d)
            elif not SYSTEM.match(n):
                die("%s needs %s, which is neither bundled nor the system's" % (dst, n))
        run(["patchelf", "--set-rpath", ":".join(dirs), dst])

    # libstoker and the programs load only the system's libraries and the
    # wheel's own. ldd lists their whole closure, each library found through
    # the RUNPATH of the one that needs it, so this covers stoker.libs too.
    for dst in tops:
        for name, path in ldd(dst).items():
            if not SYSTEM.match(name) and not os.path.realpath(path).startswith(root + os.sep):
                die("%s loads %s from %s, outside the wheel" % (dst, name, path))
    return len(bundle)


def metadata(version, readme):
    with open(readme) as f:
        body = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "Description-Content-Type: text/markdown\n\n%s"
            % (NAME, version, SUMMARY, body))


def write_wheel(root, out, version, tag, readme):
    dist_info = "%s-%s.dist-info" % (NAME, version)
    meta = {
        "METADATA": metadata(version, readme),
        "WHEEL": ("Wheel-Version: 1.0\nGenerator: stoker scripts/wheel.py\n"
                  "Root-Is-Purelib: false\nTag: py3-none-%s\n" % tag),
        "entry_points.txt": "[console_scripts]\n" + "".join(
            "%s = %s\n" % e for e in ENTRY_POINTS),
        "top_level.txt": "stoker\nstoker_bin\n",
    }
    when = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())))[:6]
    when = max(when, (1980, 1, 1, 0, 0, 0))
    path = os.path.join(out, "%s-%s-py3-none-%s.whl" % (NAME, version, tag))
    os.makedirs(out, exist_ok=True)
    tmp = path + ".part"
    record = []

    def add(zf, arcname, data, mode):
        zi = zipfile.ZipInfo(arcname, when)
        zi.external_attr = (stat.S_IFREG | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(zi, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append((arcname, "sha256=" + digest.decode(), str(len(data))))

    with zipfile.ZipFile(tmp, "w") as zf:
        for d, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for f in sorted(files):
                full = os.path.join(d, f)
                with open(full, "rb") as fh:
                    data = fh.read()
                mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
                add(zf, os.path.relpath(full, root).replace(os.sep, "/"), data, mode)
        for name, text in meta.items():
            add(zf, dist_info + "/" + name, text.encode(), 0o644)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerows(record)
        w.writerow((dist_info + "/RECORD", "", ""))
        zi = zipfile.ZipInfo(dist_info + "/RECORD", when)
        zi.external_attr = (stat.S_IFREG | 0o644) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(zi, buf.getvalue().encode())
    os.replace(tmp, path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", required=True, help="a `cmake --install` prefix of a stoker build")
    ap.add_argument("--python-src", required=True, help="client/python of the source tree")
    ap.add_argument("--work", required=True, help="an empty folder to assemble the wheel in")
    ap.add_argument("--out", required=True, help="where the .whl is written")
    args = ap.parse_args()
    root = os.path.realpath(args.work)
    if os.path.exists(root) and os.listdir(root):
        die("--work %s is not empty" % root)
    version = project_version(args.prefix)  # stoker.pc: CMake's PROJECT_VERSION
    tag = platform_tag()
    nlibs = stage(args, root)
    path = write_wheel(root, args.out, version, tag,
                       os.path.join(args.python_src, "README.md"))
    print("wheel.py: %d bundled libraries, %.1f MB" % (nlibs, os.path.getsize(path) / 1e6))
    print(os.path.abspath(path))


if __name__ == "__main__":
    main()
