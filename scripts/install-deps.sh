#!/usr/bin/env bash
# Installs what inflight needs to build and test on Debian 12: Debian -dev packages, ccache
# (compiles of a second run come from its cache) and clang-format (the format check), plus
# python3-jinja2 (the chat-template reference), python3-jsonschema (the JSON Schema validator of
# guided outputs), chromium (the web page's browser test) and Slurm with munge (a one-node
# cluster the tests start: leader mode under srun --mpi=pmix); and the npm packages the tests use
# (tools/oracle: the tokenizer oracle, the OpenAI SDK, playwright-core). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libpcre2-dev
  libsentencepiece-dev python3-sentencepiece python3-jinja2 python3-jsonschema libcli11-dev clang libclang-rt-14-dev nodejs npm
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libcpp-httplib-dev libboost-dev prometheus-cpp-dev
  prometheus curl chromium libssl-dev openssl libopenmpi-dev openmpi-bin iproute2 ccache clang-format zlib1g-dev
  slurmctld slurmd slurm-client munge libpmix-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere than Debian (they do on the project's machines).
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Every package of tools/oracle/package.json must be there (a checkout may predate one).
if ! (cd tools/oracle && node -e '
  const deps = Object.keys(require("./package.json").dependencies);
  process.exit(deps.every((d) => require("fs").existsSync("node_modules/" + d)) ? 0 : 1)'); then
  echo "install-deps: installing the tokenizer oracle (npm)"
  (cd tools/oracle && npm ci --no-audit --no-fund --loglevel=error)
fi
