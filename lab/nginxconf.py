"""nginx.conf for one lab run, from its resolved settings (see scenarios.toml)."""

from labconf import seconds

UPSTREAM = "origin"
STATUS_PATH = "/circuit_breaker"


def _ms(value):
    return "%dms" % round(seconds(value) * 1000)


def render(run, prefix, ports, listen_port, module_path):
    proxy = run["proxy"]
    module = run["module"]
    lines = []
    add = lines.append
    if module:
        add(f"load_module {module_path};")
    add(f"worker_processes {int(run.get('workers', 2))};")
    add("worker_rlimit_nofile 20000;")
    add("daemon off;")
    add("master_process on;")
    add(f"pid {prefix}/nginx.pid;")
    add(f"error_log {prefix}/error.log notice;")
    add("events { worker_connections 8000; }")
    add("http {")
    state = "$circuit_breaker_state" if module else "-"
    # One line per client request: its id, and every attempt nginx made with its timing.
    add(
        "    log_format lab '$msec $request_time $status \"$http_x_request_id\" "
        '"$upstream_addr" "$upstream_status" "$upstream_response_time" '
        f"\"{state}\"';"
    )
    add(f"    access_log {prefix}/access.log lab;")
    if module:
        # cb-replay's format, with the connection and the request's id last
        # (scripts/lab-replay).
        add(
            "    log_format circuit_breaker_replay '$msec $request_time \"$proxy_host\" "
            '"$circuit_breaker_route" "$upstream_addr" "$upstream_status" '
            '"$upstream_response_time" "$upstream_header_time" "$circuit_breaker_state" '
            "\"$circuit_breaker_msec\" \"$connection $http_x_request_id\"';"
        )
        add(f"    access_log {prefix}/replay.log circuit_breaker_replay;")
    add(f"    client_body_temp_path {prefix}/tmp_body;")
    add(f"    proxy_temp_path {prefix}/tmp_proxy;")
    cache = run.get("cache")
    if cache:
        add(f"    proxy_cache_path {prefix}/cache keys_zone=lab:4m inactive=10m;")
    for extra in run.get("http_extra", []):
        add(f"    {extra}")
    add(f"    upstream {UPSTREAM} {{")
    for p in ports:
        add(f"        server 127.0.0.1:{p} {run.get('server_params', '')};".replace(" ;", ";"))
    for extra in run.get("upstream_extra", []):
        add(f"        {extra}")
    if proxy.get("keepalive"):
        add(f"        keepalive {int(proxy['keepalive'])};")
    if module:
        add(f"        circuit_breaker {run['breaker']};".replace(" ;", ";"))
        if run.get("failure"):
            add(f"        circuit_breaker_failure {run['failure']};")
    add("    }")
    add("    server {")
    add(f"        listen 127.0.0.1:{listen_port} backlog=4096;")
    add("        location / {")
    add(f"            proxy_pass http://{UPSTREAM};")
    add("            proxy_http_version 1.1;")
    add('            proxy_set_header Connection "";')
    for key in ("connect_timeout", "read_timeout", "send_timeout"):
        if key in proxy:
            add(f"            proxy_{key} {_ms(proxy[key])};")
    if proxy.get("next_upstream"):
        add(f"            proxy_next_upstream {proxy['next_upstream']};")
    if "next_upstream_tries" in proxy:
        add(f"            proxy_next_upstream_tries {int(proxy['next_upstream_tries'])};")
    if cache:
        add("            proxy_cache lab;")
        valid = max(1, round(seconds(cache.get("valid", "1s"))))  # whole seconds only
        add(f"            proxy_cache_valid 200 {valid}s;")
        add("            proxy_cache_use_stale error timeout updating http_500 http_502 http_503 http_504;")
        add("            add_header X-Cache-Status $upstream_cache_status always;")
    if module:
        add("            circuit_breaker_header on;")
    for extra in run.get("location_extra", []):
        add(f"            {extra}")
    add("        }")
    if module:
        add(f"        location = {STATUS_PATH} {{ circuit_breaker_status; access_log off; }}")
    add("    }")
    add("}")
    return "\n".join(lines) + "\n"
