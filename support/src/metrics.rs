//! Serving Prometheus text on a listener of its own, for the daemons'
//! `--metrics-listen` (each keeps its own registry and metrics).

/// The text exposition of `registry`.
pub fn text(registry: &prometheus::Registry) -> Vec<u8> {
    use prometheus::Encoder as _;
    let mut out = Vec::new();
    let _ = prometheus::TextEncoder::new().encode(&registry.gather(), &mut out);
    out
}

/// Serves `GET /metrics` with `render`'s text on `listener` until the
/// process ends (plain HTTP; keep the address off public networks).
pub async fn serve<F>(listener: tokio::net::TcpListener, render: F)
where
    F: Fn() -> Vec<u8> + Clone + Send + Sync + 'static,
{
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let render = render.clone();
            async move { ([("content-type", "text/plain; version=0.0.4")], render()) }
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "metrics listener ended");
    }
}
