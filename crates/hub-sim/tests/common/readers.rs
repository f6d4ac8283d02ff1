//! Readers of the hub's built-in endpoint, shared by the tests and the delivery bench:
//! Microsoft's Rust SDK (`azure_messaging_eventhubs`, what cloud-writer reads with) and a
//! plain fe2o3-amqp receiver that asks for a given settle mode and accepts every delivery.

use azure_messaging_eventhubs::models::ReceivedEventData;
use azure_messaging_eventhubs::{
    ConsumerClient, OpenReceiverOptions, StartLocation, StartPosition,
};
use fe2o3_amqp::link::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{Body, Source};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use futures::StreamExt as _;
use hub_sim::HubSim;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a reader waits for the next event before it reports a stall.
pub const STALL: Duration = Duration::from_secs(60);

/// Opens Microsoft's Rust SDK on the hub's connection string, dialling its plain AMQP port
/// (as cloud-writer does for `UseDevelopmentEmulator=true`).
pub async fn sdk_consumer(hub: &HubSim) -> ConsumerClient {
    sdk_consumer_at(hub.amqp_addr(), "amqp", &hub.eventhub_connection_string()).await
}

/// Opens Microsoft's Rust SDK on `connection_string`, dialling `addr` with `scheme` (`amqp`
/// plain, `amqps` TLS).
pub async fn sdk_consumer_at(
    addr: SocketAddr,
    scheme: &str,
    connection_string: &str,
) -> ConsumerClient {
    let _ = rustls::crypto::ring::default_provider().install_default();
    ConsumerClient::builder()
        .with_custom_endpoint(format!("{scheme}://{addr}"))
        .open_with_connection_string(connection_string, None)
        .await
        .expect("the Rust SDK opens the hub's connection string")
}

/// Reads `count` events of `partition` from its start with the SDK's partition receiver;
/// returns their sequence numbers. Panics when no event arrives for [`STALL`].
pub async fn sdk_read(consumer: &ConsumerClient, partition: usize, count: usize) -> Vec<i64> {
    let mut sequence_numbers = Vec::with_capacity(count);
    sdk_read_while(consumer, partition, |event| {
        sequence_numbers.push(event.sequence_number().expect("x-opt-sequence-number"));
        sequence_numbers.len() < count
    })
    .await;
    sequence_numbers
}

/// Reads `partition` from its start with the SDK's partition receiver, handing each event
/// to `more` until it returns false. Panics when no event arrives for [`STALL`].
pub async fn sdk_read_while(
    consumer: &ConsumerClient,
    partition: usize,
    mut more: impl FnMut(&ReceivedEventData) -> bool,
) {
    let options = OpenReceiverOptions {
        start_position: Some(StartPosition {
            location: StartLocation::Earliest,
            inclusive: false,
        }),
        ..Default::default()
    };
    let receiver = consumer
        .open_receiver_on_partition(partition.to_string(), Some(options))
        .await
        .expect("a partition receiver opens");
    {
        let mut events = receiver.stream_events();
        let mut read = 0;
        loop {
            let event = tokio::time::timeout(STALL, events.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("partition {partition}: no event for {STALL:?} after {read}")
                })
                .expect("the event stream goes on")
                .expect("an event, not an error");
            read += 1;
            if !more(&event) {
                break;
            }
        }
    }
    receiver.close().await.expect("the receiver detaches");
}

/// A plain fe2o3-amqp connection to the hub, authorized on `$cbs` with the `service` key.
pub struct Fe2o3Reader {
    connection: fe2o3_amqp::connection::ConnectionHandle<()>,
    session: SessionHandle<()>,
}

impl Fe2o3Reader {
    /// Connects (SASL ANONYMOUS, then a CBS token for the hub valid for an hour).
    pub async fn connect(hub: &HubSim) -> Fe2o3Reader {
        Fe2o3Reader::connect_for(hub, Duration::from_secs(3600)).await
    }

    /// Connects with a CBS token valid for `lifetime`, never renewed.
    pub async fn connect_for(hub: &HubSim, lifetime: Duration) -> Fe2o3Reader {
        let mut connection = Connection::builder()
            .container_id("hub-sim-tests")
            .hostname("localhost")
            .sasl_profile(SaslProfile::Anonymous)
            .open(format!("amqp://{}", hub.amqp_addr()).as_str())
            .await
            .expect("an AMQP connection opens");
        let mut session = Session::begin(&mut connection)
            .await
            .expect("a session begins");
        let mut cbs = CbsClient::attach(&mut session)
            .await
            .expect("$cbs attaches");
        let audience = format!("sb://localhost/{}", hub.config().hub_name);
        let token = hub_sim::make_token(
            &audience,
            hub.policy_keys().service.as_bytes(),
            hub_sim::now_secs() + lifetime.as_secs(),
            Some("service"),
        );
        cbs.put_token(
            audience.as_str(),
            CbsToken::new(token, "servicebus.windows.net:sastoken", None),
        )
        .await
        .expect("the hub takes the service policy's token");
        cbs.close().await.expect("$cbs detaches");
        Fe2o3Reader {
            connection,
            session,
        }
    }

    /// Attaches a receiver on `partition` from its start that asks for `mode`, with
    /// `credit` granted again each time half of it was used (fe2o3-amqp's `Auto` mode).
    pub async fn receiver(
        &mut self,
        hub: &HubSim,
        partition: usize,
        mode: SenderSettleMode,
        credit: u32,
    ) -> Receiver {
        let address = format!(
            "{}/ConsumerGroups/$Default/Partitions/{partition}",
            hub.config().hub_name
        );
        Receiver::builder()
            .name(format!("reader-{partition}-{mode:?}"))
            .source(Source::builder().address(address).build())
            .sender_settle_mode(mode)
            .credit_mode(CreditMode::Auto(credit))
            .attach(&mut self.session)
            .await
            .expect("a partition receiver attaches")
    }

    /// Closes the session and the connection.
    pub async fn close(mut self) {
        let _ = self.session.end().await;
        let _ = self.connection.close().await;
    }
}

/// Receives `count` events on `receiver`, accepting each (which is what refills credit in
/// fe2o3-amqp's `Auto` mode, pre-settled or not); returns their sequence numbers. Panics when
/// no event arrives for [`STALL`].
pub async fn fe2o3_read(receiver: &mut Receiver, count: usize) -> Vec<i64> {
    let key = OwnedKey::from(Symbol::from("x-opt-sequence-number"));
    let mut sequence_numbers = Vec::with_capacity(count);
    while sequence_numbers.len() < count {
        let delivery = tokio::time::timeout(STALL, receiver.recv::<Body<Value>>())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no event for {STALL:?} after {} (credit left {})",
                    sequence_numbers.len(),
                    receiver.credit()
                )
            })
            .expect("a delivery");
        let sequence_number = delivery
            .message()
            .message_annotations
            .as_ref()
            .and_then(|a| a.get(&key))
            .and_then(|v| match v {
                Value::Long(n) => Some(*n),
                _ => None,
            })
            .expect("x-opt-sequence-number");
        receiver.accept(&delivery).await.expect("accepted");
        sequence_numbers.push(sequence_number);
    }
    sequence_numbers
}
