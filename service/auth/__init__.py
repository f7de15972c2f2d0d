"""Authentication and authorization: ``local`` (tokens bound to roles) and ``kubernetes``
(TokenReview + SubjectAccessReview) modes behind one :class:`Authenticator` protocol."""

from .principal import AuthBackendError, Authenticator, Permission, Principal

__all__ = ["AuthBackendError", "Authenticator", "Permission", "Principal"]
