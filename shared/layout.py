"""The names of a home's files that more than one package reads or writes, relative to the
home they are in. A file only one module touches keeps its name there.

In every home (the root home and each ``profiles/<name>``):
"""

CONFIG_FILE = "config.yaml"
SECRETS_FILE = ".env"  # the profile's API keys and tokens, as NAME=value lines
GATEWAY_STATE_FILE = "gateway_state.json"  # what the profile's gateway is and runs
GATEWAY_STARTS_FILE = "gateway_starts.json"  # the gateway's recent starts, for its storm breaker
PROFILE_AUTH_FILE = "auth.json"  # the profile's pointer into the shared account store
SKINS_DIR = "skins"

# In the root home only: what every profile of the install shares.
SHARED_DIR = "shared"
NOUS_STORE_FILE = f"{SHARED_DIR}/nous_auth.json"  # the Nous account store (secrets: 0600)
GUEST_HANDOFF_FILE = f"{SHARED_DIR}/guest_handoff.json"  # guest handoff records, beside the store
