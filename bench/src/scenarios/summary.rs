//! The headline figures derived from several scenarios' percentiles (see
//! docs/benchmarks.md): latency each proxy adds over the direct path, their
//! ratios, warm worker versus interpreter per call, and the price of
//! authentication. Pure: scenario figures in, summary entries out.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::load::Summary;

/// Scenario figures by name.
type Scenarios = BTreeMap<String, Summary>;
/// Summary entries by key.
type Figures = BTreeMap<String, Value>;

fn p50(s: &Summary) -> u64 {
    s.p50_us
}

fn p99(s: &Summary) -> u64 {
    s.p99_us
}

/// Percentile `f` of scenario `name`, when it ran.
fn pct(sc: &Scenarios, name: &str, f: fn(&Summary) -> u64) -> Option<u64> {
    sc.get(name).map(f)
}

/// Percentile `f` of `name` over that of `base` (0 when faster), when both ran.
fn added(sc: &Scenarios, name: &str, base: &str, f: fn(&Summary) -> u64) -> Option<u64> {
    Some(pct(sc, name, f)?.saturating_sub(pct(sc, base, f)?))
}

/// `a / b` to two decimals, or null.
fn ratio(a: Option<u64>, b: Option<u64>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if b > 0 => json!((a as f64 / b as f64 * 100.0).round() / 100.0),
        _ => json!(null),
    }
}

/// Inserts every derived figure into `sum` (null where an input is missing).
pub(super) fn derive(sc: &Scenarios, sum: &mut Figures) {
    proxies(sc, sum);
    cpu(sum);
    python(sc, sum);
    auth(sc, sum);
}

/// Open-loop and sequential latency the gateway, nginx and HAProxy add over
/// the direct path, and the gateway's ratio to each baseline.
fn proxies(sc: &Scenarios, sum: &mut Figures) {
    let open = |proxy: &str, f| added(sc, proxy, "open-direct", f);
    let (g50, g99) = (open("open-gateway", p50), open("open-gateway", p99));
    let (n50, n99) = (open("open-nginx", p50), open("open-nginx", p99));
    let (h50, h99) = (open("open-haproxy", p50), open("open-haproxy", p99));
    let (b50, b99) = (open("open-pingora", p50), open("open-pingora", p99));
    for (key, v) in [
        ("gateway_added_p50_us", g50),
        ("gateway_added_p99_us", g99),
        ("nginx_added_p50_us", n50),
        ("nginx_added_p99_us", n99),
        ("haproxy_added_p50_us", h50),
        ("haproxy_added_p99_us", h99),
        ("pingora_added_p50_us", b50),
        ("pingora_added_p99_us", b99),
    ] {
        sum.insert(key.into(), json!(v));
    }
    // The best of the proxies one would put there instead (bare Pingora is
    // a reference for Pingora's own cost, not one of them).
    let best50 = [n50, h50].into_iter().flatten().min();
    sum.insert(
        "gateway_vs_best_baseline_added_p50_ratio".into(),
        ratio(g50, best50),
    );
    sum.insert("gateway_vs_pingora_added_p50_ratio".into(), ratio(g50, b50));
    for (key, a, b) in [
        ("gateway_vs_nginx_added_p50_ratio", g50, n50),
        ("gateway_vs_nginx_added_p99_ratio", g99, n99),
        ("gateway_vs_haproxy_added_p50_ratio", g50, h50),
        ("gateway_vs_haproxy_added_p99_ratio", g99, h99),
    ] {
        sum.insert(key.into(), ratio(a, b));
    }
    for (key, proxy) in [
        ("sequential_gateway_added_p50_us", "gateway-python"),
        ("sequential_nginx_added_p50_us", "nginx-python"),
        ("sequential_haproxy_added_p50_us", "haproxy-python"),
    ] {
        sum.insert(key.into(), json!(added(sc, proxy, "direct-python", p50)));
    }
}

/// The gateway's CPU per request over nginx's, from the open-loop figures
/// already in `sum`.
fn cpu(sum: &mut Figures) {
    let get = |k: &str| sum.get(k).and_then(Value::as_f64);
    let r = match (get("gateway_cpu_ms_per_10k"), get("nginx_cpu_ms_per_10k")) {
        (Some(g), Some(n)) if n > 0.0 => json!((g / n * 100.0).round() / 100.0),
        _ => json!(null),
    };
    sum.insert("gateway_cpu_vs_nginx_ratio".into(), r);
}

/// The warm Python worker (through the gateway and direct) versus an
/// interpreter per call.
fn python(sc: &Scenarios, sum: &mut Figures) {
    let warm = pct(sc, "gateway-python", p50);
    let spawn = pct(sc, "spawn-python", p50);
    for (key, v) in [
        ("python_warm_p50_us", warm),
        ("python_warm_p99_us", pct(sc, "gateway-python", p99)),
        ("python_direct_p50_us", pct(sc, "direct-python", p50)),
        ("python_direct_p99_us", pct(sc, "direct-python", p99)),
        ("python_spawn_p50_us", spawn),
    ] {
        sum.insert(key.into(), json!(v));
    }
    sum.insert("python_warm_vs_spawn_speedup".into(), ratio(spawn, warm));
}

/// Decision-cache hits and misses, and Kubernetes-auth hits, against the
/// gateway with authentication disabled.
fn auth(sc: &Scenarios, sum: &mut Figures) {
    let hit = pct(sc, "auth-hit", p50);
    let off = pct(sc, "auth-disabled", p50);
    let off99 = pct(sc, "auth-disabled", p99);
    let kube50 = pct(sc, "kube-auth-hit", p50);
    let kube99 = pct(sc, "kube-auth-hit", p99);
    for (key, v) in [
        ("auth_hit_p50_us", hit),
        ("auth_miss_p50_us", pct(sc, "auth-miss", p50)),
        ("auth_disabled_p50_us", off),
        ("kube_auth_hit_p50_us", kube50),
        ("kube_auth_hit_p99_us", kube99),
        ("auth_disabled_p99_us", off99),
    ] {
        sum.insert(key.into(), json!(v));
    }
    sum.insert(
        "auth_hit_overhead_pct".into(),
        match (hit, off) {
            (Some(h), Some(o)) if o > 0 => {
                json!(((h as f64 / o as f64 - 1.0) * 1000.0).round() / 10.0)
            }
            _ => json!(null),
        },
    );
    for (key, a, b) in [
        ("kube_auth_hit_overhead_p50_us", kube50, off),
        ("kube_auth_hit_overhead_p99_us", kube99, off99),
    ] {
        sum.insert(
            key.into(),
            match (a, b) {
                (Some(a), Some(b)) => json!(a as i64 - b as i64),
                _ => json!(null),
            },
        );
    }
}

#[cfg(test)]
mod tests;
