"""Local mode: bearer tokens bound to a role, from the store or from a tokens file.

**Store tokens** (the normal way): ``sparkglass token create --user U --role R --expires-in
30d`` prints a token once; the store keeps only its SHA-256, with its expiry and revocation
time, and every request checks it, so ``sparkglass token revoke ID`` takes effect without a
restart. **Tokens file** (the bootstrap, e.g. the first admin before the store has a token):
read once at start (:func:`read_tokens_file`); its tokens never expire and are revoked by
editing the file and restarting. Roles: ``viewer`` reads cached results; ``sampler`` may also
trigger rounds; ``admin`` may also register applications and read the audit trail.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from ..store import repository
from .principal import Permission, Principal

#: Local mode has no other operator's applications; their permissions go with ``read`` so
#: that one rule holds in both modes.
_SEE = frozenset(
    {
        Permission.READ,
        Permission.READ_KUBEFLOW_APPLICATIONS,
        Permission.READ_APACHE_SPARK_APPLICATIONS,
    }
)
ROLE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    "viewer": _SEE,
    "sampler": _SEE | {Permission.TRIGGER},
    "admin": _SEE | {Permission.TRIGGER, Permission.ADMIN},
}


def read_tokens_file(path: Path) -> dict[str, tuple[str, str]]:
    """Parse a token file into ``{sha256(token): (user, role)}``. One token per line
    (``#`` starts a comment)::

        <token>,<user>,<role>        # role: viewer | sampler | admin

    Raises ``ValueError`` naming the line for a malformed line or unknown role (the token
    itself is never echoed).
    """
    tokens: dict[str, tuple[str, str]] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{path}:{lineno}: expected `token,user,role`")
        token, user, role = parts
        if role not in ROLE_PERMISSIONS:
            raise ValueError(
                f"{path}:{lineno}: role must be one of {', '.join(ROLE_PERMISSIONS)}, got {role!r}"
            )
        tokens[repository.hash_token(token)] = (user, role)
    return tokens


class LocalAuthenticator:
    """Tokens from ``tokens_file`` (read once) and from the store's ``api_tokens`` table
    (looked up on every call, so a revocation or an expiry applies at once)."""

    def __init__(self, sessions: sessionmaker[Session], tokens_file: Path | None = None) -> None:
        self._sessions = sessions
        self._file_tokens = read_tokens_file(tokens_file) if tokens_file else {}

    def add_ephemeral_token(self, token: str, user: str, role: str) -> None:
        """Accept ``token`` for this process only (never stored; e.g. the demo's token).

        Raises ``ValueError`` for an unknown role."""
        if role not in ROLE_PERMISSIONS:
            raise ValueError(f"role must be one of {', '.join(ROLE_PERMISSIONS)}, got {role!r}")
        self._file_tokens[repository.hash_token(token)] = (user, role)

    def authenticate(self, token: str, audiences: tuple[str, ...] = ()) -> Principal | None:
        """The principal of ``token`` (file first, then a store token that is neither
        revoked nor expired), or ``None``. A store token's principal carries its
        ``expires_at``. Local tokens have no audience: ``audiences`` is not checked."""
        digest = repository.hash_token(token)
        found = self._file_tokens.get(digest)
        if found is not None:
            user, role = found
            return Principal(user=user, role=role)
        with self._sessions() as session:
            info = repository.lookup_token(session, token)
        if info is None:
            return None
        return Principal(user=info.user, role=info.role, expires_at=info.expires_at)

    def authorize(self, principal: Principal, namespace: str, permission: Permission) -> bool:
        """Role check. Local mode has one namespace (``local``); other namespaces simply
        hold no applications, which the routes answer with 404."""
        return permission in ROLE_PERMISSIONS.get(principal.role or "", frozenset())
