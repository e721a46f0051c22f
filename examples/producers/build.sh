#!/usr/bin/env bash
# Build the example producers: `npm ci` for Node.js, `go build` for Go.
#
#   examples/producers/build.sh [node] [go]     (default: both)
#
# Idempotent and quick when nothing changed: npm ci is skipped while node_modules is newer than
# package-lock.json, go build while the binary is newer than its sources. The first run
# downloads the dependencies (npm registry, Go module proxy) and compiles them: about 1-2 min,
# mostly the Go compile.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(node go)

build_node() {
  cd "$here/node"
  # npm writes node_modules/.package-lock.json on every install; newer than the lock file = done.
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error
  fi
  echo "node producer: $here/node/produce.js"
}

build_go() {
  cd "$here/go"
  if [ ! -x epochq-produce ] || [ main.go -nt epochq-produce ] || [ go.mod -nt epochq-produce ] || [ go.sum -nt epochq-produce ]; then
    go build -buildvcs=false -trimpath -o epochq-produce .
  fi
  echo "go producer: $here/go/epochq-produce"
}

for target in "${targets[@]}"; do
  case "$target" in
    node) build_node ;;
    go) build_go ;;
    *) echo "build.sh: unknown target $target (expected node or go)" >&2; exit 2 ;;
  esac
done
