#!/usr/bin/env bash
# The project's test command (README "Tests"): every crate's tests with etcd discovery built in.
# Needs `protoc` and its well-known .proto files (to build the etcd client) and `etcd` (the
# discovery test starts a real one on loopback). Installs Debian's protobuf-compiler,
# libprotobuf-dev and etcd-server with apt-get when any is missing and this runs as root;
# otherwise prints the apt-get line and fails.
# `scripts/test.sh --deps-only` only makes sure of protoc and etcd (.ci/run, before clippy).
# Other arguments replace the default `--workspace --features genfront/etcd` of `cargo test`
# (e.g. `scripts/test.sh -p genfront --features etcd --test discovery`).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
# protoc's well-known types (google/protobuf/descriptor.proto, …), which etcd's protos import.
[[ -e /usr/include/google/protobuf/descriptor.proto ]] || missing+=(libprotobuf-dev)
command -v "${ETCD_BIN:-etcd}" >/dev/null 2>&1 || missing+=(etcd-server)
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        echo "scripts/test.sh: missing ${missing[*]}; install with:" >&2
        echo "    sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

if [[ ${1:-} == --deps-only ]]; then
    exit 0
fi
if (($#)); then
    exec cargo test "$@"
fi
exec cargo test --workspace --features genfront/etcd
