#!/usr/bin/env bash
# Regenerates the committed TypeScript for proto/ (gen), or proves it is up to date (check).
#   scripts/proto-gen.sh gen     buf generate into libs/protocol/src/gen
#   scripts/proto-gen.sh check   buf lint, generate into a temp dir, diff against the committed files
# Offline by design: buf.gen.yaml runs the locally installed ts-proto plugin, and google/protobuf
# imports resolve from buf's built-in well-known types.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" # buf.yaml, buf.gen.yaml and the plugin path are all relative to the repo root
buf="$root/node_modules/.bin/buf"
gen_dir="libs/protocol/src/gen"
# The compiled FileDescriptorSet (with imports) that the gateway serves through gRPC reflection: buf's own
# compiler output keeps real file names and import lists, which reflection clients need to link the schema.
descriptor="libs/protocol/descriptors/roz.binpb"
# The same for grpc.health.v1, from the health.proto that grpc-health-check (our health service) ships: proto-loader's
# own descriptor of it has relative type names and a misnamed map entry, which reflection clients cannot link.
health_proto="node_modules/grpc-health-check/proto"
health_descriptor="libs/protocol/descriptors/grpc-health.binpb"

case "${1:-}" in
  gen)
    "$buf" generate
    "$buf" build --as-file-descriptor-set -o "$descriptor"
    "$buf" build "$health_proto" --as-file-descriptor-set -o "$health_descriptor"
    ;;
  check)
    "$buf" lint
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    # --output prefixes every `out:` path, so the fresh copy lands at $tmp/$gen_dir.
    "$buf" generate --output "$tmp"
    if ! diff -ru "$gen_dir" "$tmp/$gen_dir"; then
      echo "proto:check: $gen_dir is out of date with proto/. Run 'npm run proto:gen' and commit the result." >&2
      exit 1
    fi
    "$buf" build --as-file-descriptor-set -o "$tmp/roz.binpb"
    if ! cmp -s "$descriptor" "$tmp/roz.binpb"; then
      echo "proto:check: $descriptor is out of date with proto/. Run 'npm run proto:gen' and commit the result." >&2
      exit 1
    fi
    "$buf" build "$health_proto" --as-file-descriptor-set -o "$tmp/grpc-health.binpb"
    if ! cmp -s "$health_descriptor" "$tmp/grpc-health.binpb"; then
      echo "proto:check: $health_descriptor is out of date with $health_proto. Run 'npm run proto:gen' and commit the result." >&2
      exit 1
    fi
    echo "proto:check: lint clean, generated code up to date."
    ;;
  *)
    echo "usage: $0 gen|check" >&2
    exit 2
    ;;
esac
