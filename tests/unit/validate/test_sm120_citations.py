"""Every citation of the SM120 refusal table (roles/sglang_serve/files/sm120_refusals.yml) holds
in the locked wheels, so that a new lock re-checks the table.

Marked ``network`` (CI runs it): the wheels a citation reads (sglang, flashinfer-python,
sgl-deep-gemm: about 26 MB) are fetched by the lock's version with ``pip download --no-deps``
into a cache outside the checkout (``$SGLANG_LXC_CITATION_CACHE``, default
``~/.cache/sglang-lxc-tests/wheels``), their sha256 checked against the lock, and the cited file
read from the zip: the cited line must hold exactly the cited text. A wheel already in the cache
with the lock's sha256 is not fetched again. The cubin listings of the two kernel wheels too large
for a unit test (sglang-kernel 322 MB, flashinfer-cubin 360 MB) were recorded once: the lock must
still pin the recorded version and sha256 (a new lock fails here until they are recorded again).

The offline checks (the table's shape, the lock's sha256 of each wheel) run without the network.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.loaders import ROOT

TABLE = ROOT / "roles/sglang_serve/files/sm120_refusals.yml"
DATA = yaml.safe_load(TABLE.read_text())
LOCK = ROOT / "roles/sglang/files/locks" / DATA["lock"]
CACHE = Path(os.environ.get("SGLANG_LXC_CITATION_CACHE",
                            Path.home() / ".cache/sglang-lxc-tests/wheels"))

_spec = importlib.util.spec_from_file_location("lock_stack_for_citations",
                                               ROOT / "scripts/lock_stack.py")
lock_stack = importlib.util.module_from_spec(_spec)
sys.modules["lock_stack_for_citations"] = lock_stack
_spec.loader.exec_module(lock_stack)


def lock_pins() -> dict[str, tuple[str, str]]:
    """name -> (version, sha256) of the lock."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)\s+#\s*sha256:([0-9a-f]{64})", line)
        if found:
            pins[found[1].lower()] = (found[2], found[3])
    return pins


def all_cites() -> list[tuple[str, dict]]:
    """(id, citation) of every row's cite and instead_cite, and of the allowed list."""
    out = []
    for row in DATA["refusals"]:
        for number, cite in enumerate(row.get("cite") or []):
            out.append((f"{row['id']}-{number}", cite))
        for number, cite in enumerate(row.get("instead_cite") or []):
            out.append((f"{row['id']}-instead-{number}", cite))
    for number, entry in enumerate(DATA.get("allowed") or []):
        for sub, cite in enumerate(entry["cite"]):
            out.append((f"allowed-{number}-{sub}", cite))
    return out


SOURCE_CITES = [(i, c) for i, c in all_cites() if "source" in c]
LISTING_CITES = [(i, c) for i, c in all_cites() if "listing" in c]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel(name: str) -> Path:
    """The lock's wheel of ``name``: from the cache when its sha256 matches, else pip download
    --no-deps (binary only, the lock's Python and platforms); its sha256 must be the lock's.
    A download goes to a folder of its own and is renamed into the cache once its sha256 is
    checked, so a run beside this one never reads a half-written wheel."""
    version, want = lock_pins()[name]
    folder = CACHE / f"{name}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    for found in folder.glob("*.whl"):
        if sha256(found) == want:
            return found
    aside = Path(tempfile.mkdtemp(prefix=".download-", dir=folder))
    try:
        return _download(name, version, want, aside, folder)
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _download(name: str, version: str, want: str, aside: Path, folder: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--disable-pip-version-check",
           "--no-input", "--progress-bar", "off", "--no-deps", "--only-binary=:all:",
           "--dest", str(aside), "--python-version", lock_stack.DEFAULT_PYTHON,
           "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none",
           *[f"--platform={p}" for p in lock_stack.DEFAULT_PLATFORMS], f"{name}=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    matching = [w for w in aside.glob("*.whl") if sha256(w) == want]
    assert matching, (f"{name}=={version}: no downloaded wheel has the lock's sha256 {want}: "
                      f"{[w.name for w in aside.glob('*.whl')]}")
    os.replace(matching[0], folder / matching[0].name)
    return folder / matching[0].name


@pytest.fixture(scope="module")
def wheels():
    """Each cited wheel, opened once."""
    opened = {}
    for name in sorted({c["source"] for _i, c in SOURCE_CITES}):
        opened[name] = zipfile.ZipFile(wheel(name))
    yield opened
    for handle in opened.values():
        handle.close()


@pytest.mark.network
@pytest.mark.parametrize(("cite_id", "cite"), SOURCE_CITES, ids=[i for i, _c in SOURCE_CITES])
def test_each_cited_line_holds_in_the_locked_wheel(wheels, cite_id, cite):
    archive = wheels[cite["source"]]
    if "listing_of" in cite:
        names = [n.rsplit("/", 1)[-1] for n in archive.namelist()
                 if n.startswith(cite["listing_of"]) and not n.endswith("/")]
        assert names, f"{cite['listing_of']} is empty in {cite['source']}"
        assert all(n.startswith(tuple(cite["prefixes"])) for n in names), names
        return
    data = archive.read(cite["file"])
    if "contains" in cite:
        assert cite["contains"].encode() in data
        return
    lines = data.decode("utf-8").splitlines()
    assert 0 < cite["line"] <= len(lines), f"{cite['file']} has {len(lines)} lines"
    got = lines[cite["line"] - 1].strip()
    assert got == cite["text"].strip(), (
        f"{cite['source']} {cite['file']}:{cite['line']} holds {got!r}, not {cite['text']!r}; "
        f"the text is at line(s) "
        f"{[n for n, line in enumerate(lines, 1) if line.strip() == cite['text'].strip()]}")


@pytest.mark.parametrize(("cite_id", "cite"), LISTING_CITES, ids=[i for i, _c in LISTING_CITES])
def test_each_recorded_cubin_listing_is_the_locks(cite_id, cite):
    """The listing was recorded for the lock's wheel: same version, same sha256; the record holds
    the architectures cited (no SM120 among them)."""
    listing = DATA["listings"][cite["listing"]]
    version, digest = lock_pins()[listing["wheel"]]
    assert (listing["version"], listing["sha256"]) == (version, digest), (
        f"the lock pins {listing['wheel']}=={version} ({digest}): record its listing again "
        f"({listing['how'].strip()})")
    record = " ".join((ROOT / listing["recorded_in"]).read_text().split())
    assert " ".join(listing["text"].split()) in record
    assert not any(a.lower().startswith("sm120") or a.lower().startswith("sm_120")
                   for a in cite["archs"])
    for arch in cite["archs"]:
        assert arch in listing["text"]


def test_the_table_names_only_locked_wheels_and_complete_rows():
    pins = lock_pins()
    for _i, cite in SOURCE_CITES:
        assert cite["source"] in pins, cite
    for row in DATA["refusals"]:
        assert {"id", "kind", "why", "instead", "cite"} <= set(row), row
        assert row["kind"] in ("attention_backend", "moe_runner_backend", "fp8_gemm_backend",
                               "env"), row
        assert row["cite"], row["id"]
    ids = [row["id"] for row in DATA["refusals"]]
    assert len(ids) == len(set(ids))
