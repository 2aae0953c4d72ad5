#!/usr/bin/env bash
# test_install.sh - `cmake --install` into a fresh prefix, then everything
# the README names runs from there with no build tree and no
# LD_LIBRARY_PATH or STOKER_LIB: the binaries (their RUNPATH is
# $ORIGIN/../lib), a one-rank job on loopback (coordinator, worker,
# stoker-train-loop --verify), and the Python package finding the
# installed libstoker by itself; for --prefix /usr/local (staged with
# DESTDIR), the package lands on /usr/bin/python3's sys.path and imports
# with no PYTHONPATH (checked in a private mount namespace, as root).
# usage: test_install.sh BUILD_DIR [SANITIZE]  (SANITIZE non-empty: a
# sanitizer build, whose libstoker python cannot load without a preload)
set -uo pipefail
build=$1
sanitize=${2:-}
prefix=$(mktemp -d /tmp/stoker-install-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$prefix"
}
trap cleanup EXIT
fail=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi; }
# DIR is on /usr/bin/python3's own sys.path
on_syspath() { /usr/bin/python3 -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$1"; }
# TREE mounted at /usr/local (private mount namespace): import stoker with
# no PYTHONPATH/STOKER_LIB, and it loads /usr/local/lib's libstoker
import_at_usr_local() {
  env -u PYTHONPATH -u STOKER_LIB unshare -m sh -c 'mount --bind "$1" /usr/local && cd / &&
    exec /usr/bin/python3 -c "import stoker, sys; print(stoker.lib_path); sys.exit(not stoker.lib_path.startswith(\"/usr/local/lib/\"))"' sh "$1"
}

cmake --install "$build" --prefix "$prefix" >"$prefix.install.log" 2>&1
check '[ $? -eq 0 ]' "cmake --install into $prefix" || { cat "$prefix.install.log"; }
# a prefix python does not search: the install says the PYTHONPATH to set
check "grep -q 'not on .*path: run python with PYTHONPATH=$prefix/lib/python3' '$prefix.install.log'" \
  "the install says the PYTHONPATH for a prefix python does not search"
rm -f "$prefix.install.log"
unset LD_LIBRARY_PATH STOKER_LIB
for b in stoker-coordinator stoker-worker stoker stoker-train-loop stoker-dataset stoker-bench; do
  check "[ -x '$prefix/bin/$b' ] && '$prefix/bin/$b' --help >/dev/null 2>&1" \
    "$b is installed and runs from the prefix"
done
check "readelf -d '$prefix/bin/stoker-train-loop' | grep -q 'RUNPATH.*\$ORIGIN/../'" \
  "stoker-train-loop's RUNPATH is relative to the binary"
# stoker plan prices with the instance table installed beside it
printf 'source = imagefolder\ndataset = d\npipeline = train\nbatch_size = 32\n' >"$prefix/plan.conf"
check "'$prefix/bin/stoker' plan --job '$prefix/plan.conf' --accel ml.p3.2xlarge \
  --compute-ms 50 --images-per-cpu-s 500 --data ml.c5.9xlarge --max-data-hosts 1 \
  | grep -qF 'prices: $prefix/bin/../share/stoker/instances.tsv'" \
  "stoker plan reads the installed instance table"

# a whole job from the prefix
job=$prefix/job.conf
printf 'source = synthetic\nnum_samples = 64\nheight = 8\nwidth = 8\nbatch_size = 4\nworld_size = 1\nepochs = 1\n' >"$job"
"$prefix/bin/stoker-coordinator" --listen 127.0.0.1:0 --port-file "$prefix/c.port" \
  --job "$job" >"$prefix/c.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$prefix/c.port" ] && break; sleep 0.1; done
cport=$(cat "$prefix/c.port" 2>/dev/null)
"$prefix/bin/stoker-worker" --coordinator "127.0.0.1:$cport" --listen 127.0.0.1:0 \
  --threads 1 >"$prefix/w.log" 2>&1 &
pids+=($!)
check "timeout 120 '$prefix/bin/stoker-train-loop' --coordinator 127.0.0.1:$cport --rank 0 --world-size 1 --verify >'$prefix/t.log' 2>&1" \
  "a one-rank job runs from the prefix, every batch verified"
grep -q "verify_failures 0" "$prefix/t.log" || { fail=1; cat "$prefix/t.log"; }

pydir=$(find "$prefix" -type d -name stoker -path '*python*' | head -1)
if [ -n "$sanitize" ]; then
  echo "skip the installed Python package check: a $sanitize build (python cannot load it without the sanitizer runtime preloaded)"
elif [ -n "$pydir" ]; then
  check "PYTHONPATH='$(dirname "$pydir")' /usr/bin/python3 -c 'import stoker, sys; sys.exit(0 if stoker.lib_path.startswith(\"$prefix\") else 1)'" \
    "the installed Python package loads the installed libstoker"
else
  echo "FAIL the Python package is installed"; fail=1
fi
# --prefix /usr/local as the README says, staged under DESTDIR: the package
# lands in a folder on /usr/bin/python3's own sys.path, and (in a private
# mount namespace where the staged tree is /usr/local) imports with no
# PYTHONPATH and loads the libstoker installed beside it.
stage=$prefix/destdir
if [ -n "$sanitize" ]; then
  echo "skip the --prefix /usr/local check: a $sanitize build"
elif DESTDIR=$stage cmake --install "$build" --prefix /usr/local >"$prefix/dest.log" 2>&1; then
  init=$(find "$stage/usr/local" -path '*packages/stoker/__init__.py' | head -1)
  site=${init%/stoker/__init__.py}
  site=${site#"$stage"}
  check "[ -n '$init' ] && on_syspath '$site'" \
    "--prefix /usr/local puts the package on /usr/bin/python3's sys.path ($site)"
  if unshare -m true 2>/dev/null; then
    check "import_at_usr_local '$stage/usr/local'" \
      "with the tree at /usr/local, /usr/bin/python3 imports stoker with no PYTHONPATH"
  else
    echo "skip the import from /usr/local: no private mount namespace here (needs root)"
  fi
else
  cat "$prefix/dest.log"
  echo "FAIL DESTDIR=... cmake --install --prefix /usr/local"; fail=1
fi
if [ "$fail" -ne 0 ]; then
  for f in c w t; do echo "---- $f.log"; tail -20 "$prefix/$f.log" 2>/dev/null; done
  exit 1
fi
echo "install: passed"
