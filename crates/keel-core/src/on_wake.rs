//! A future polled only once it has been woken.
//!
//! A loop that waits on a rare event (cancellation, shutdown, a client leaving) beside a
//! busy one (a stream's next delta) polls every waiter on every turn. Waiters such as a
//! cancellation token's take a lock to look at their state each time, although nothing
//! changed: their waker never fired. [`OnWake`] gives its future a waker of its own and
//! polls it again only after that waker fired, so a turn of the loop costs an atomic load.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Wraps `future` so that it is polled first and then only after it asked to be.
pub fn on_wake<F: Future>(future: F) -> OnWake<F> {
    let signal = Arc::new(Signal {
        // The first poll always reaches the future: it has registered no waker yet.
        woken: AtomicBool::new(true),
        task: AtomicWaker::new(),
    });
    OnWake {
        future: Box::pin(future),
        waker: Waker::from(signal.clone()),
        signal,
    }
}

/// See [`on_wake`].
pub struct OnWake<F> {
    future: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// The waker the future is polled with: it marks the signal and wakes the task.
    waker: Waker,
}

struct Signal {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> Future for OnWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the flag is read: a wake-up in between is not lost.
        this.signal.task.register(cx.waker());
        if !this.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.future
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `ready` is set and it was woken for it.
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn the_future_is_polled_again_only_after_its_waker_fired() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut wait = std::pin::pin!(on_wake(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: waker.clone(),
        }));
        for _ in 0..5 {
            assert!(futures::poll!(wait.as_mut()).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "polled once, then left alone"
        );
        ready.store(true, Ordering::SeqCst);
        assert!(
            futures::poll!(wait.as_mut()).is_pending(),
            "not woken: not polled"
        );
        waker.lock().unwrap().take().unwrap().wake();
        assert!(futures::poll!(wait.as_mut()).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_wake_from_another_thread_reaches_the_waiting_task() {
        let token = tokio_util::sync::CancellationToken::new();
        let wait = on_wake(token.clone().cancelled_owned());
        let waiter = tokio::spawn(wait);
        tokio::task::yield_now().await;
        std::thread::spawn(move || token.cancel()).join().unwrap();
        waiter.await.unwrap();
    }
}
