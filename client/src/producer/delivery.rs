//! What a producer's caller gets back: a [`Pending`] future that resolves to the message's
//! [`Delivery`] once its batch is acknowledged, or to the batch's error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::producer::ProducerError;

/// Where an acknowledged message went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Address of the broker that took it.
    pub addr: String,
    /// The partition it went to (the broker's choice for partition −1).
    pub partition: i32,
    /// The message's offset: its own for a plain batch, its wrapper's for a compressed one.
    /// `None` with acks 0, which the broker does not answer.
    pub offset: Option<i64>,
}

pub(crate) type DeliverySender = oneshot::Sender<Result<Delivery, ProducerError>>;

/// A message accepted into a batch; await it for the acknowledgement.
#[derive(Debug)]
#[must_use = "a pending message reports its error only when awaited"]
pub struct Pending {
    pub(crate) reply: oneshot::Receiver<Result<Delivery, ProducerError>>,
}

impl Future for Pending {
    type Output = Result<Delivery, ProducerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The sender is dropped without a reply only if the producer's task died with it.
        Pin::new(&mut self.reply).poll(cx).map(|r| r.unwrap_or(Err(ProducerError::Closed)))
    }
}
