#!/usr/bin/env bash
# Make the mesh's Secrets in the current kubectl namespace from this home's keys.
#
#   HERMES_HOME=~/.hermes-k8s bash deploy/kubernetes/make-secrets.sh [kubectl arguments, e.g. -n hermes]
#
# The home is the operator's: `hermes mesh keys init --profile coder` makes what is missing (a
# secret key per service and this home's client key, authorized as `local`), never replacing a
# key. Two probe client keys are made in a scratch home that is removed after: `gateway-probe`,
# granted gateway.turn (a gateway's probe is a turn), for the gateways' pods, and `probe`, granted
# nothing (a worker's probe is a hello), for the workers'. Each Secret holds one secret key, or
# only public keys (hermes-mesh-trust); kubectl reads the files, so no key is on a command line
# or printed. Run it again after a rotation: every Secret is applied anew.
set -euo pipefail

store="${HERMES_HOME:-$HOME/.hermes}/mesh/curve"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

hermes mesh keys init --profile coder >/dev/null
for probe in gateway-probe probe; do
    HERMES_HOME="$scratch/$probe" hermes mesh keys init >/dev/null
    grants=()
    if [[ $probe == gateway-probe ]]; then grants=(--grant gateway.turn); fi
    hermes mesh keys authorize "$probe" "$(HERMES_HOME="$scratch/$probe" hermes mesh keys show --client)" "${grants[@]}" >/dev/null
done

apply() {  # NAME --from-file=KEY=PATH ...
    local name="$1"
    shift
    kubectl "${kubectl_args[@]}" create secret generic "$name" "$@" --dry-run=client -o yaml |
        kubectl "${kubectl_args[@]}" apply -f - >/dev/null
    echo "secret/$name"
}
kubectl_args=("$@")

apply hermes-server-gateway --from-file=key_secret="$store/server/gateway.key_secret"
apply hermes-server-gateway-coder --from-file=key_secret="$store/server/gateway@coder.key_secret"
apply hermes-server-auth-worker --from-file=key_secret="$store/server/auth_worker.key_secret"
apply hermes-server-handoff-retry --from-file=key_secret="$store/server/handoff_retry.key_secret"
apply hermes-server-hook-reporter --from-file=key_secret="$store/server/hook_reporter.key_secret"
apply hermes-client-gateway-probe --from-file=key_secret="$scratch/gateway-probe/mesh/curve/client.key_secret"
apply hermes-client-probe --from-file=key_secret="$scratch/probe/mesh/curve/client.key_secret"
apply hermes-mesh-trust \
    --from-file=authorized.local.key="$store/authorized/local.key" \
    --from-file=authorized.gateway-probe.key="$store/authorized/gateway-probe.key" \
    --from-file=authorized.gateway-probe.grants="$store/authorized/gateway-probe.grants" \
    --from-file=authorized.probe.key="$store/authorized/probe.key" \
    --from-file=servers.gateway.key="$store/servers/gateway.key" \
    --from-file=servers.gateway-coder.key="$store/servers/gateway@coder.key" \
    --from-file=servers.auth_worker.key="$store/servers/auth_worker.key" \
    --from-file=servers.handoff_retry.key="$store/servers/handoff_retry.key" \
    --from-file=servers.hook_reporter.key="$store/servers/hook_reporter.key"
