# Shared helpers for scripts/*; sourced, not run.
step() { printf '==> %s\n' "$*"; }
# rustup's cargo, for shells whose PATH lacks it (CI runs with a plain environment).
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# The nginx tree scripts/setup configures, and the binary it installs.
NGINX_SRC=${NGINX_SRC:-$PWD/build/nginx-src}
NGINX_BIN=${NGINX_BIN:-$PWD/build/nginx/sbin/nginx}
MODULE_SO=$PWD/build/ngx_http_circuit_breaker_module.so
