"""handoff: does an LLM customer-service agent hand off to a human exactly when it should?

Importing the package prepares the process for tau2 (which imports litellm): use litellm's bundled
cost map instead of fetching it from the network, and keep loguru quiet unless asked otherwise.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _quiet_loguru() -> None:
    try:
        from loguru import logger
    except ImportError:  # pragma: no cover - loguru comes with tau2
        return
    logger.remove()
    level = os.environ.get("HANDOFF_LOG_LEVEL")
    if level:
        import sys

        logger.add(sys.stderr, level=level)


_quiet_loguru()

__version__ = "0.1.0"
