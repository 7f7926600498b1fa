"""Which verl versions mapo's integration is written against, and the import-time check."""

from __future__ import annotations

import logging
import os

SUPPORTED_VERL_VERSIONS: tuple[str, ...] = ("0.9.1",)
# mapo is installed already when this runs (mapo-rl is not on PyPI): what is missing is verl itself
INSTALL_HINT = "pip install 'verl[verl-core]==0.9.1' (or, in a mapo checkout, pip install -e '.[verl]')"
SKIP_CHECK_ENV = "MAPO_VERL_SKIP_VERSION_CHECK"


def require_verl() -> str:
    """Import verl and return its version; ImportError with the fix when it is missing or unsupported.

    The integration reads verl internals (estimator signature, agent-loop output
    contract) that change between releases, so other versions are refused unless
    MAPO_VERL_SKIP_VERSION_CHECK=1 says to try anyway.
    """
    supported = ", ".join(SUPPORTED_VERL_VERSIONS)
    try:
        import verl
    except ImportError as err:
        raise ImportError(
            f"mapo.integrations.verl needs verl (supported: {supported}), which is not installed: {INSTALL_HINT}"
        ) from err
    version = str(getattr(verl, "__version__", "unknown"))
    if version not in SUPPORTED_VERL_VERSIONS and os.environ.get(SKIP_CHECK_ENV) != "1":
        message = (
            f"mapo.integrations.verl supports verl {supported}, but verl {version} is installed "
            f"({os.path.dirname(getattr(verl, '__file__', '') or '?')}). Install the supported version with "
            f"{INSTALL_HINT}, or set {SKIP_CHECK_ENV}=1 to try this one at your own risk."
        )
        # verl loads plugins with their errors logged at debug level only: say it here as well.
        logging.getLogger("mapo").error(message)
        raise ImportError(message)
    return version
