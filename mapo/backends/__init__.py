"""Chat backends for the environment's LLM roles.

`transports`: which chat transport a role's options name (default: `openai_compat`, any
OpenAI-compatible HTTP server, configured by `endpoint`; or a plug-in); `json_output`:
structured replies (extract, validate, repair once, fall back).
"""

from mapo.backends.endpoint import BackendError, BackendRequestError, BackendUnavailable, ChatBackendConfig
from mapo.backends.json_output import ChatClient, JSONOutputError, JSONReply, request_json
from mapo.backends.openai_compat import ChatBackend, shared_backend
from mapo.backends.transports import TRANSPORTS, chat_client

__all__ = [
    "BackendError",
    "BackendRequestError",
    "BackendUnavailable",
    "ChatBackend",
    "ChatBackendConfig",
    "ChatClient",
    "chat_client",
    "JSONOutputError",
    "JSONReply",
    "TRANSPORTS",
    "request_json",
    "shared_backend",
]
