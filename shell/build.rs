// Exposes the nginx build's TLS support (from nginx-sys's `links = "nginx"` metadata) as a cfg,
// so that the connections in net/ touch `c->ssl` only where nginx has it.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(ngx_ssl)");
    println!("cargo::rerun-if-env-changed=DEP_NGINX_FEATURES");
    let features = std::env::var("DEP_NGINX_FEATURES").unwrap_or_default();
    if features.split(',').any(|f| f == "http_ssl") {
        println!("cargo::rustc-cfg=ngx_ssl");
    }
}
