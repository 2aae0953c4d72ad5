#!/usr/bin/env bash
# install-deps.sh - install every Debian package stoker needs to build, test
# and run the demo (bookworm). Idempotent; run as root (or with sudo).
# Each package and why is listed in README.md, "Dependencies".
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config          # toolchain
  libgrpc-dev                                # gRPC C core (grpc/grpc.h)
  libprotobuf-c-dev protobuf-c-compiler      # protobuf-c + protoc-c
  libjpeg62-turbo-dev libturbojpeg0-dev      # libjpeg-turbo (libjpeg API)
  libpng-dev                                 # libpng: PNG samples of ImageFolder datasets
  liburing-dev                               # io_uring reads
  libmicrohttpd-dev                          # the daemons' Prometheus /metrics endpoint
  libsystemd-dev                             # sd_notify (Type=notify systemd units)
  clang libclang-rt-14-dev clang-format      # libFuzzer targets, sanitizer runtime, layout check
  python3 python3-numpy python3-torch python3-torchvision python3-pil  # binding, parity tests
  python3-yaml                               # checks of the Kubernetes manifests (tests/deploy)
  python3-grpcio python3-protobuf protobuf-compiler  # a stock gRPC client in the health test
  iproute2 procps                            # netns tests, process tools
  openssl                                    # deploy/stoker-certs (TLS certificates) and the TLS test
  valgrind                                   # memcheck of the JPEG pipeline (libjpeg is not ASan-instrumented)
  prometheus                                 # promtool (exposition, rules) and the real Prometheus of tests/monitoring
  python3-venv                               # the wheel test installs the wheel into a fresh venv (tests/deploy/test_wheel.sh)
  patchelf                                   # scripts/wheel.sh: $ORIGIN-relative RPATH on the libraries and binaries it bundles
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
