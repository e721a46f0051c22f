#!/usr/bin/env bash
# Build the example producers and consumers: `npm ci` for Node.js, `go build` for Go, `mvn package` for Java.
#
#   examples/producers/build.sh [node] [go] [java]     (default: all three)
#
# Idempotent and quick when nothing changed: npm ci is skipped while node_modules is newer than
# package-lock.json, go build while the binary is newer than its sources, mvn while
# java/target/epochq-produce.jar (every dependency shaded in) is newer than pom.xml and src/. The
# first run downloads the dependencies (npm registry, Go module proxy, Maven Central) and
# compiles them: about 1-2 min, mostly the Go compile (the Java build: about 30 s, 5 s once
# the Maven cache holds its dependencies).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(node go java)

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
  if [ ! -x epochq-consume ] || [ consume/main.go -nt epochq-consume ] || [ go.mod -nt epochq-consume ] || [ go.sum -nt epochq-consume ]; then
    go build -buildvcs=false -trimpath -o epochq-consume ./consume
  fi
  echo "go producer: $here/go/epochq-produce; consumer: $here/go/epochq-consume"
}

build_java() {
  cd "$here/java"
  local jar=target/epochq-produce.jar
  if [ ! -f "$jar" ] || [ pom.xml -nt "$jar" ] || [ -n "$(find src -newer "$jar" -print -quit)" ]; then
    mvn -B -q package
  fi
  echo "java producer: java -jar $here/java/$jar"
}

for target in "${targets[@]}"; do
  case "$target" in
    node) build_node ;;
    go) build_go ;;
    java) build_java ;;
    *) echo "build.sh: unknown target $target (expected node, go or java)" >&2; exit 2 ;;
  esac
done
