// Exposes the nginx build's features (from nginx-sys's `links = "nginx"` metadata) as cfgs, so
// that code touching optional struct fields (such as `c->ssl`) follows the nginx it is built for.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(ngx_ssl)");
    println!("cargo::rustc-check-cfg=cfg(ngx_http_cache)");
    println!("cargo::rustc-check-cfg=cfg(ngx_http_upstream_zone)");
    println!("cargo::rustc-check-cfg=cfg(ngx_table_elt_next)");
    println!("cargo::rustc-check-cfg=cfg(ngx_zone_peers_config)");
    println!("cargo::rustc-check-cfg=cfg(ngx_pass_trailers_flag)");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_FEATURES");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_VERSION_NUMBER");
    // nginx 1.23.0 chained repeated headers through `ngx_table_elt_t.next`.
    let version: u64 = std::env::var("DEP_NGINX_VERSION_NUMBER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if version >= 1_023_000 {
        println!("cargo::rustc-cfg=ngx_table_elt_next");
    }
    // nginx 1.27.3 counts changes to an upstream zone's peers (`peers->config`), which names
    // resolved at run time make.
    if version >= 1_027_003 {
        println!("cargo::rustc-cfg=ngx_zone_peers_config");
    }
    // nginx 1.27.2 made the upstream conf's `pass_trailers` a flag (`proxy_pass_trailers`);
    // before, it was a bit that `grpc_pass` set.
    if version >= 1_027_002 {
        println!("cargo::rustc-cfg=ngx_pass_trailers_flag");
    }
    let features = std::env::var("DEP_NGINX_FEATURES").unwrap_or_default();
    for f in features.split(',') {
        match f {
            "http_ssl" => println!("cargo::rustc-cfg=ngx_ssl"),
            "http_cache" => println!("cargo::rustc-cfg=ngx_http_cache"),
            "http_upstream_zone" => println!("cargo::rustc-cfg=ngx_http_upstream_zone"),
            _ => {}
        }
    }
}
