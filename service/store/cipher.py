"""Driver control tokens at rest: encrypted with Fernet (``cryptography``), never stored
in plaintext.

In local execution mode the store keeps, per application, the bearer token of its driver's
control endpoint (``applications.driver_token``): whoever reads the database file or a
backup of it could otherwise start rounds on every registered driver. The column holds
``fernet:<token>`` (AES-128-CBC + HMAC-SHA256, :class:`cryptography.fernet.Fernet`); the key
comes from ``SPARKGLASS_STORE_KEY`` or a generated key file (:func:`store_cipher`;
docs/security.md, "The store at rest").
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import make_url
from sqlalchemy.orm import Session, sessionmaker

from .db import sqlite_file_path

log = logging.getLogger(__name__)

#: Prefix of an encrypted value in the column (anything else is a plaintext left by an older
#: version, encrypted at the next start).
PREFIX = "fernet:"
#: The setting that holds the key(s), for messages.
SETTING = "SPARKGLASS_STORE_KEY"
#: Mode of a generated key file.
KEY_FILE_MODE = 0o600
_INFO_KEY = "sparkglass.store_cipher"


class StoreKeyMissing(ValueError):
    """A driver token would be stored and no key is configured (a non-SQLite store)."""

    def __init__(self) -> None:
        super().__init__(
            f"driver tokens are stored encrypted and no key is set: set {SETTING} to a "
            "Fernet key (python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'); see docs/security.md"
        )


class StoreKeyInvalid(ValueError):
    """A stored driver token cannot be decrypted with the configured key(s)."""


class StoreCipher:
    """Encrypts and decrypts driver tokens with one or more Fernet keys (first encrypts).

    Raises ``ValueError`` naming :data:`SETTING` (never the key) for no key or a malformed
    one (a Fernet key is 32 url-safe base64-encoded bytes).
    """

    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError(f"{SETTING}: expected at least one Fernet key")
        try:
            fernets = [Fernet(k.strip().encode()) for k in keys]
        except (ValueError, TypeError):
            raise ValueError(
                f"{SETTING}: expected Fernet keys (32 url-safe base64-encoded bytes each, "
                "separated by commas)"
            ) from None
        self._primary = fernets[0]
        self._fernet = MultiFernet(fernets)

    @staticmethod
    def is_encrypted(value: str) -> bool:
        """Whether a column value is an encrypted token (else a plaintext one)."""
        return value.startswith(PREFIX)

    def encrypt(self, token: str) -> str:
        """``fernet:<ciphertext>`` of ``token`` under the first key."""
        return PREFIX + self._fernet.encrypt(token.encode()).decode()

    def decrypt(self, value: str) -> str:
        """The token in a column value; :class:`StoreKeyInvalid` when no key opens it.
        A plaintext value (an older version's) is returned as is."""
        if not self.is_encrypted(value):
            return value
        try:
            return self._fernet.decrypt(value[len(PREFIX) :].encode()).decode()
        except InvalidToken:
            raise StoreKeyInvalid(
                f"a stored driver token cannot be decrypted with the key(s) in {SETTING} "
                "(a key was changed without keeping the old one second in the list?)"
            ) from None

    def rotate(self, value: str) -> str:
        """``value`` encrypted under the first key: plaintext is encrypted, a token under
        an older key re-encrypted, one under the first key returned as is.
        :class:`StoreKeyInvalid` when no key opens it."""
        if not self.is_encrypted(value):
            return self.encrypt(value)
        try:
            self._primary.decrypt(value[len(PREFIX) :].encode())
            return value
        except InvalidToken:
            pass
        try:
            return PREFIX + self._fernet.rotate(value[len(PREFIX) :].encode()).decode()
        except InvalidToken:
            raise StoreKeyInvalid(
                f"a stored driver token cannot be decrypted with the key(s) in {SETTING}"
            ) from None


def _key_file_key(path: Path) -> str:
    """The key in ``path``, generated (mode 0600, never a window at the umask's) if absent."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_FILE_MODE)
    except FileExistsError:
        return _existing_key(path)
    with os.fdopen(fd, "w") as f:
        f.write(Fernet.generate_key().decode() + "\n")
    log.info("generated the store key %s (set %s to choose one)", path, SETTING)
    return path.read_text().strip()


def _existing_key(path: Path) -> str:
    """The key in the existing file ``path``, which must be a regular file of this user.

    The key file sits next to the database file, in a directory other local users may write
    to: a symbolic link or a file planted there would give the service a key (or a file)
    of someone else's choosing, who could then read the tokens it encrypts. Raises
    ``ValueError`` naming the file (never its content) for a link, a non-regular file or
    one owned by another user.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        kind = "is a symbolic link" if path.is_symlink() else f"cannot be read ({exc.strerror})"
        raise ValueError(f"store key file {path} {kind}; remove it or set {SETTING}") from None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise ValueError(
                f"store key file {path} is not a regular file owned by uid {os.geteuid()} "
                f"(owner uid {info.st_uid}); remove it or set {SETTING}"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            log.warning("store key file %s had mode %o; setting %o", path, mode, KEY_FILE_MODE)
            os.fchmod(f.fileno(), KEY_FILE_MODE)
        return f.read().strip()


def key_file_of(database_url: str) -> Path | None:
    """``<database file>.key`` for a SQLite file URL, else ``None``."""
    database = sqlite_file_path(database_url)
    return None if database is None else database.with_name(database.name + ".key")


def store_cipher(keys: str | None, database_url: str) -> StoreCipher | None:
    """The cipher for the store at ``database_url``: from ``keys`` (comma-separated Fernet
    keys) when set, else a generated key (SQLite), else ``None``. Raises ``ValueError``
    naming the setting for malformed keys.

    * ``SPARKGLASS_STORE_KEY``: one Fernet key, or several separated by commas for rotation
      (:class:`~cryptography.fernet.MultiFernet`: the first encrypts, every one decrypts; the
      service re-encrypts stored tokens under the first at start);
    * unset, with a SQLite file store: a key generated once into ``<database file>.key``,
      created mode 0600 next to the file and reused afterwards (it protects backups and
      copies of the database file that leave the key behind, not a reader of the directory);
    * unset, with an in-memory SQLite store: a key for this process only;
    * unset, with any other store (PostgreSQL): none; registering a driver token is refused
      with :class:`StoreKeyMissing`, which names the setting.

    The session factory carries the cipher in ``Session.info`` (:func:`attach`), so the
    repository encrypts and decrypts where it reads and writes the column."""
    if keys and keys.strip():
        return StoreCipher([k for k in keys.split(",") if k.strip()])
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        return None
    path = key_file_of(database_url)
    if path is None:  # in memory: the tokens live as long as this process
        return StoreCipher([Fernet.generate_key().decode()])
    return StoreCipher([_key_file_key(path)])


def attach(sessions: sessionmaker[Session], cipher: StoreCipher | None) -> None:
    """Give every session of ``sessions`` the cipher (``None``: driver tokens refused)."""
    sessions.configure(info={_INFO_KEY: cipher})


def cipher_of(session: Session) -> StoreCipher | None:
    """The cipher attached to ``session``'s factory, if any."""
    value = session.info.get(_INFO_KEY)
    return value if isinstance(value, StoreCipher) else None
