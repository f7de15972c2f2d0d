"""Attack on the generated store key: a key file planted next to the database.

Without ``SPARKGLASS_STORE_KEY`` a SQLite store's driver tokens are encrypted with a key
the service generates into ``<database file>.key``. When that file exists, the service used
to read whatever is there, following a symbolic link: a local user who can write the
database's directory (``/tmp/...``, a shared volume) plants ``store.db.key`` as a link to a
file holding a key of theirs, and every driver token the service stores is encrypted with a
key the attacker knows. Now an existing key file must be a regular file of the service's
user, opened without following links; otherwise the service does not start, naming the
file (never its content). Real files; the service's own start-up path (``store_cipher``) and
the real ``sparkglass serve`` process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from sparkglass.service.store.cipher import PREFIX, store_cipher

REPO = Path(__file__).resolve().parents[2]


def plant(tmp_path: Path) -> tuple[Path, str]:
    """The attacker's key file and a link to it at ``<db>.key``; the attacker's key."""
    shared = tmp_path / "shared"
    shared.mkdir()
    attacker_key = Fernet.generate_key().decode()
    theirs = tmp_path / "attacker" / "key"
    theirs.parent.mkdir()
    theirs.write_text(attacker_key + "\n")
    os.chmod(theirs, 0o600)
    (shared / "store.db.key").symlink_to(theirs)
    return shared / "store.db", attacker_key


def test_a_planted_key_link_is_refused_not_used(tmp_path: Path) -> None:
    db, attacker_key = plant(tmp_path)
    try:
        cipher = store_cipher(None, f"sqlite:///{db}")
    except ValueError as exc:
        assert "symbolic link" in str(exc) and str(db) + ".key" in str(exc)
        assert attacker_key not in str(exc)
        return
    # Today: the token is encrypted with the attacker's key, which opens it.
    assert cipher is not None
    stored = cipher.encrypt("driver-control-token")
    opened = Fernet(attacker_key.encode()).decrypt(stored[len(PREFIX) :].encode()).decode()
    pytest.fail(f"the service encrypted with the planted key (the attacker reads {opened!r})")


def test_the_service_does_not_start_with_a_planted_key_file(tmp_path: Path) -> None:
    db, attacker_key = plant(tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "SPARKGLASS_DATABASE_URL": f"sqlite:///{db}",
        "SPARKGLASS_PORT": "0",
    }
    env.pop("SPARKGLASS_STORE_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "sparkglass", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "store.db.key" in output and "symbolic link" in output, output[-2000:]
    assert attacker_key not in output


def test_an_own_key_file_still_works_and_is_narrowed(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    first = store_cipher(None, f"sqlite:///{db}")
    assert first is not None
    key_file = tmp_path / "store.db.key"
    os.chmod(key_file, 0o644)
    again = store_cipher(None, f"sqlite:///{db}")
    assert again is not None
    assert again.decrypt(first.encrypt("t")) == "t"
    assert (key_file.stat().st_mode & 0o777) == 0o600
