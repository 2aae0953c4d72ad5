"""stoker_bin - the console entry points of the stoker wheel.

`pip install stoker-*.whl` puts stoker-coordinator, stoker-worker, stoker,
stoker-dataset (prepare, gen, index, ...) and stoker-launch on the
environment's PATH as small scripts that call these functions. Each one
replaces the Python process with the program bundled in this folder
(exec: signals, exit codes, stdin/stdout and the process id are the
program's own), so a data host's worker costs no Python beyond the start. The bundled daemons find their shared libraries
in ../stoker.libs through their RUNPATH (scripts/wheel.py sets it):
nothing needs LD_LIBRARY_PATH.

Standard library only, and it must not import the `stoker` package
(that loads libstoker; a data host only needs the daemons).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _exec(argv):
    try:
        os.execv(argv[0], argv)
    except OSError as e:
        sys.stderr.write("%s: cannot run %s: %s\n" % (os.path.basename(sys.argv[0]), argv[0], e))
        sys.exit(127)


def _program(name):
    _exec([os.path.join(HERE, name)] + sys.argv[1:])


def coordinator():
    _program("stoker-coordinator")


def worker():
    _program("stoker-worker")


def cli():
    _program("stoker")


def dataset():
    _program("stoker-dataset")


def launch():
    # The launcher is a Python script; run by this interpreter, its
    # sys.argv[0] is the bundled copy, so it finds the daemons next to it.
    _exec([sys.executable, os.path.join(HERE, "stoker-launch")] + sys.argv[1:])
