"""A client library for accessing Klavis Local Sandbox API"""

from .client import AuthenticatedClient, Client

__all__ = (
    "AuthenticatedClient",
    "Client",
)
