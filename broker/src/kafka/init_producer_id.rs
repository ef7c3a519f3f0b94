//! InitProducerId: a new producer id, or the same id in the next epoch for a producer that
//! bumps its epoch after an error (KIP-360). A transactional id's producer is the transaction
//! coordinator's to hand out (`transactions`).

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, InitProducerIdResponse, ProducerId};
use protocol::kafka::request::{Header, InitProducerIdRequest, Malformed};
use protocol::kafka::response::encode;

use super::client::Client;

pub async fn init_producer_id(
    client: &Client,
    header: &Header,
    request: InitProducerIdRequest,
) -> Result<BytesMut, Malformed> {
    if request.transactional_id.is_some() {
        return super::transactions::init_transactional(client, header, request).await;
    }
    let body = if request.producer_id >= 0 && request.producer_epoch >= 0 {
        // A producer bumping its epoch after an error keeps its id (KIP-360).
        let epoch = request.producer_epoch.checked_add(1);
        match epoch {
            Some(epoch) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(request.producer_id))
                .with_producer_epoch(epoch),
            None => {
                let id = client.node.allocate_producer_id();
                InitProducerIdResponse::default().with_producer_id(ProducerId(id))
            }
        }
    } else {
        let id = client.node.allocate_producer_id();
        InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(0)
    };
    encode(ApiKey::InitProducerId, header, &body)
}
