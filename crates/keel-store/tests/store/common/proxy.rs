//! A TCP proxy in front of the database server, steered by the test: it ends every
//! connection through it at once, and turns away as many new connections as it is told.
//! A connection turned away is accepted and closed before the server's greeting, which a
//! client takes for a failed connect (not a refused one, which sqlx's pool would retry by
//! itself).

use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

pub struct Proxy {
    /// `host:port` to connect to instead of the server's.
    pub address: String,
    steering: Arc<Mutex<Steering>>,
    turned_away: mpsc::UnboundedReceiver<()>,
    accepting: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Steering {
    to_turn_away: usize,
    connections: JoinSet<()>,
}

impl Proxy {
    /// A proxy for the server at `server` (`host:port`).
    pub async fn start(server: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let steering = Arc::new(Mutex::new(Steering::default()));
        let (tell, turned_away) = mpsc::unbounded_channel();
        let accepting = tokio::spawn(accept(listener, server, steering.clone(), tell));
        Self {
            address,
            steering,
            turned_away,
            accepting,
        }
    }

    /// Turns away the next `count` new connections.
    pub fn turn_away(&self, count: usize) {
        self.steering.lock().unwrap().to_turn_away = count;
    }

    /// Ends every connection through the proxy, and returns once they are closed.
    pub async fn cut(&self) {
        let mut connections = std::mem::take(&mut self.steering.lock().unwrap().connections);
        connections.shutdown().await;
    }

    /// Waits until one more connection has been turned away.
    pub async fn one_turned_away(&mut self) {
        self.turned_away.recv().await.unwrap();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.steering.lock().unwrap().connections.abort_all();
    }
}

async fn accept(
    listener: TcpListener,
    server: String,
    steering: Arc<Mutex<Steering>>,
    turned_away: mpsc::UnboundedSender<()>,
) {
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let mut steering = steering.lock().unwrap();
        if steering.to_turn_away > 0 {
            steering.to_turn_away -= 1;
            drop(client);
            let _ = turned_away.send(());
            continue;
        }
        let server = server.clone();
        steering.connections.spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(&server).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
    }
}
