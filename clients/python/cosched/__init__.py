"""A Python client for csd, cosched's control plane API (docs/python-client.md).

    import cosched
    with cosched.Client("127.0.0.1:7443") as client:
        client.tag("instance-0000002a", "acme", isolation="tenant")

The API's messages are generated from proto/ into cosched.v1 at build time
(clients/python/generate.sh), which may live in another directory on
sys.path than this package: the build tree's, for example.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from cosched.client import DEFAULT_TIMEOUT_S, Client, isolation_name  # noqa: E402
from cosched.errors import (  # noqa: E402
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "Client", "DEFAULT_TIMEOUT_S", "isolation_name", "Error", "InvalidArgument", "NotFound",
    "FailedPrecondition", "PermissionDenied", "Unauthenticated",
    "ResourceExhausted", "Unavailable", "DeadlineExceeded",
]
