use super::*;

fn figures(p50_us: u64, p99_us: u64) -> Summary {
    Summary {
        count: 1,
        ok: 1,
        errors: BTreeMap::new(),
        p50_us,
        p90_us: p50_us,
        p99_us,
        p999_us: p99_us,
        p99_ci95_us: [p99_us, p99_us],
        max_us: p99_us,
        mean_us: p50_us as f64,
        achieved_rps: 1.0,
    }
}

fn scenarios(rows: &[(&str, u64, u64)]) -> Scenarios {
    rows.iter()
        .map(|(n, a, b)| (n.to_string(), figures(*a, *b)))
        .collect()
}

#[test]
fn every_figure_is_derived_from_the_scenarios() {
    let sc = scenarios(&[
        ("open-direct", 100, 200),
        ("open-gateway", 300, 500),
        ("open-nginx", 200, 400),
        ("open-haproxy", 150, 100),
        ("open-pingora", 140, 260),
        ("direct-python", 90, 150),
        ("gateway-python", 250, 400),
        ("nginx-python", 80, 100),
        ("spawn-python", 25_000, 30_000),
        ("auth-hit", 210, 300),
        ("auth-miss", 400, 600),
        ("auth-disabled", 200, 280),
        ("kube-auth-hit", 190, 320),
    ]);
    let mut sum = Figures::new();
    sum.insert("gateway_cpu_ms_per_10k".into(), json!(1500.0));
    sum.insert("nginx_cpu_ms_per_10k".into(), json!(1200.0));
    derive(&sc, &mut sum);
    let want = json!({
        "gateway_cpu_ms_per_10k": 1500.0, "nginx_cpu_ms_per_10k": 1200.0,
        "gateway_cpu_vs_nginx_ratio": 1.25,
        "pingora_added_p50_us": 40, "pingora_added_p99_us": 60,
        // The lower of nginx's and HAProxy's: HAProxy's 50.
        "gateway_vs_best_baseline_added_p50_ratio": 4.0,
        "gateway_vs_pingora_added_p50_ratio": 5.0,
        "gateway_added_p50_us": 200, "gateway_added_p99_us": 300,
        "nginx_added_p50_us": 100, "nginx_added_p99_us": 200,
        // Faster than direct counts as nothing added.
        "haproxy_added_p50_us": 50, "haproxy_added_p99_us": 0,
        "gateway_vs_nginx_added_p50_ratio": 2.0, "gateway_vs_nginx_added_p99_ratio": 1.5,
        "gateway_vs_haproxy_added_p50_ratio": 4.0, "gateway_vs_haproxy_added_p99_ratio": null,
        "sequential_gateway_added_p50_us": 160, "sequential_nginx_added_p50_us": 0,
        "sequential_haproxy_added_p50_us": null,
        "python_warm_p50_us": 250, "python_warm_p99_us": 400,
        "python_direct_p50_us": 90, "python_direct_p99_us": 150,
        "python_spawn_p50_us": 25_000, "python_warm_vs_spawn_speedup": 100.0,
        "auth_hit_p50_us": 210, "auth_miss_p50_us": 400, "auth_disabled_p50_us": 200,
        "auth_disabled_p99_us": 280, "auth_hit_overhead_pct": 5.0,
        "kube_auth_hit_p50_us": 190, "kube_auth_hit_p99_us": 320,
        "kube_auth_hit_overhead_p50_us": -10, "kube_auth_hit_overhead_p99_us": 40,
    });
    assert_eq!(json!(sum), want);
}

#[test]
fn figures_of_scenarios_that_did_not_run_are_null() {
    let mut sum = Figures::new();
    derive(&Scenarios::new(), &mut sum);
    assert_eq!(sum.len(), 33);
    assert!(sum.values().all(Value::is_null), "{sum:?}");
}
