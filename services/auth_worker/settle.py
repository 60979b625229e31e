"""``settle_after_upgrade``: what a completed sign-in does to a profile's configuration.

A config on the welcome route (a fresh install's: no model chosen, or ``model.route:
welcome``) moves to the account's host and the tier's recommended default model. A config
the operator pointed anywhere else is theirs and is left alone. Called exactly once per
completed sign-in, after the store's locks are released.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nous.access_token import Claims
from shared import config, files

WELCOME_ROUTE = "welcome"
ACCOUNT_ROUTE = "account"
# The tier's recommended default when the portal cannot be asked (the portal's
# ``GET /api/model/recommended-default`` answers the same table).
RECOMMENDED_NOUS_DEFAULT_MODEL = {"free": "Hermes-4-14B", "plus": "Hermes-4-70B", "pro": "Hermes-4-405B"}


def recommended_nous_default_model(tier: str) -> str:
    return RECOMMENDED_NOUS_DEFAULT_MODEL.get(tier, RECOMMENDED_NOUS_DEFAULT_MODEL["free"])


def on_welcome_route(model: Any) -> bool:
    return model is None or (isinstance(model, dict) and model.get("route") == WELCOME_ROUTE)


def settle_after_upgrade(home: Path, claims: Claims, model_name: str) -> str:
    """Move ``home``'s config onto the account when it is on the welcome route: "moved", or
    "kept" when the operator chose otherwise. Blocks (a locked read-modify-write of the file);
    ``ConfigError`` for a config that cannot be read or written back."""
    path = config.config_path(home)
    with files.locked(path):
        doc = config.load_document(home)
        model = doc.data.get("model")
        if not on_welcome_route(model):
            return "kept"
        if model is None:
            doc.data["model"] = model = {}
        model["provider"] = "nous"
        model["route"] = ACCOUNT_ROUTE
        model["base_url"] = claims.host
        model["default"] = model_name
        config.save_document(home, doc)
    return "moved"
