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
MODULE_SO=${MODULE_SO:-$PWD/build/ngx_http_circuit_breaker_module.so}
# The stream module, which scripts/build-module puts beside it.
STREAM_MODULE_SO=${STREAM_MODULE_SO:-$(dirname "$MODULE_SO")/ngx_stream_circuit_breaker_module.so}
# The release's version ([workspace.package] in Cargo.toml): both crates', the module's and
# the Debian package's.
crate_version() { sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml; }
# The version an nginx binary reports (`nginx -v`).
nginx_version() { "$1" -v 2>&1 | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p'; }
# Where scripts/build-for-nginx puts the module built for Debian's nginx (--debian), and for
# another nginx of version $1.
debian_module_so() {
    printf '%s/build/for-debian-nginx-%s/ngx_http_circuit_breaker_module.so\n' \
        "$PWD" "$(nginx_version /usr/sbin/nginx)"
}
custom_module_so() { printf '%s/build/for-nginx-%s/ngx_http_circuit_breaker_module.so\n' "$PWD" "$1"; }
