# Shared helpers for scripts/*; sourced, not run.
step() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# The nginx tree scripts/setup configures, and the binary it installs.
NGINX_SRC=${NGINX_SRC:-$PWD/build/nginx-src}
NGINX_BIN=${NGINX_BIN:-$PWD/build/nginx/sbin/nginx}
MODULE_SO=$PWD/build/ngx_http_circuit_breaker_module.so
