//! `keel mock-provider`: serves the scriptable mock provider until Ctrl-C or SIGTERM.

use std::net::SocketAddr;

use anyhow::Context as _;
use keel_mock::MockConfig;
use tokio::net::TcpListener;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on, e.g. 127.0.0.1:8800 (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8800")]
    pub listen: SocketAddr,
    /// Default tokens per second; 0 streams as fast as possible. Scripts may override it.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rate.is_finite() && args.rate >= 0.0,
        "--rate must be a non-negative number of tokens per second"
    );
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    // Scripts and tests read this line to find the port when listening on port 0.
    tracing::info!(%addr, rate = args.rate, "mock provider listening on http://{addr}/v1");
    let config = MockConfig::default().with_rate(args.rate);
    keel_mock::serve(listener, config, super::shutdown_signal())
        .await
        .context("mock provider failed")?;
    tracing::info!("mock provider stopped");
    Ok(())
}
