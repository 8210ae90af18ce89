// Exposes the nginx build's features (from nginx-sys's `links = "nginx"` metadata) as cfgs, so
// that the connections in net/ touch `c->ssl` only where nginx has it, and the round-robin
// peers in eject/ touch an upstream `zone`'s fields only where nginx has them.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(ngx_ssl)");
    println!("cargo::rustc-check-cfg=cfg(ngx_http_upstream_zone)");
    println!("cargo::rustc-check-cfg=cfg(ngx_stream_upstream_zone)");
    println!("cargo::rustc-check-cfg=cfg(ngx_zone_peers_config)");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_FEATURES");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_VERSION_NUMBER");
    // nginx 1.27.3 counts changes to an upstream zone's peers (`peers->config`), which names
    // resolved at run time make.
    let version: u64 = std::env::var("DEP_NGINX_VERSION_NUMBER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if version >= 1_027_003 {
        println!("cargo::rustc-cfg=ngx_zone_peers_config");
    }
    let features = std::env::var("DEP_NGINX_FEATURES").unwrap_or_default();
    for f in features.split(',') {
        match f {
            "http_ssl" => println!("cargo::rustc-cfg=ngx_ssl"),
            "http_upstream_zone" => println!("cargo::rustc-cfg=ngx_http_upstream_zone"),
            "stream_upstream_zone" => println!("cargo::rustc-cfg=ngx_stream_upstream_zone"),
            _ => {}
        }
    }
}
