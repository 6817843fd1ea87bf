"""Offline stand-in for the pip bootstrap script ansible-test downloads (get-pip.py).

ansible-test makes a virtual environment without pip for each sanity test and runs its
bootstrap script in it, which it downloads from a host these machines cannot reach. This script
does what that one does, with what is here: pip from the interpreter's own ensurepip, then
``pip install`` of what ansible-test asked for (its pinned pip) from the package index.
get-pip.py's own flags ``--no-setuptools`` and ``--no-wheel`` are honoured.
scripts/sanity puts it where ansible-test looks for its cached copy.
"""

import subprocess
import sys

OWN_FLAGS = ("--no-setuptools", "--no-wheel")

args = [a for a in sys.argv[1:] if a not in OWN_FLAGS]
subprocess.check_call([sys.executable, "-m", "ensurepip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *args])
if "--no-setuptools" in sys.argv:
    subprocess.check_call([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "setuptools"])
