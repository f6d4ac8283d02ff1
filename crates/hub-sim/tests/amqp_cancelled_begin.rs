//! The vendored AMQP stack (`vendor/fe2o3-amqp`, PATCHED.md) keeps a connection whose
//! client cancelled a session's begin after its Begin went out, as the Event Hubs SDK does
//! when a partition's reading ends while its receiver is still attaching. Published 0.16
//! (and 0.17) closed the whole connection when the peer's answering Begin arrived ("Session
//! is not found"), dropping every other session on it: a writer's other partitions.
//!
//! The peer here is fe2o3-amqp's own acceptor: it holds its answer to the first Begin, and
//! the client gives that begin up once the peer has it.

use fe2o3_amqp::acceptor::{ConnectionAcceptor, SessionAcceptor};
use fe2o3_amqp::{Connection, Session};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_outlives_a_session_begin_cancelled_before_its_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (first_begin_arrived, first_begin) = oneshot::channel::<()>();
    let answer_first = Arc::new(Notify::new());
    let server = tokio::spawn({
        let answer_first = answer_first.clone();
        async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut connection = ConnectionAcceptor::new("peer").accept(tcp).await.unwrap();
            let sessions = SessionAcceptor::new();
            let mut accepted = Vec::new();
            let mut first_begin_arrived = Some(first_begin_arrived);
            for _ in 0..2 {
                let incoming = connection.next_incoming_session().await.unwrap();
                if let Some(arrived) = first_begin_arrived.take() {
                    let _ = arrived.send(());
                    answer_first.notified().await;
                }
                accepted.push(
                    sessions
                        .accept_incoming_session(incoming, &mut connection)
                        .await
                        .unwrap(),
                );
            }
            // Held until the client is done.
            let _ = connection.on_close().await;
            drop(accepted);
        }
    });

    let mut connection = Connection::open("client", format!("amqp://{addr}").as_str())
        .await
        .unwrap();
    // The first begin is given up once its Begin reached the peer, which holds its answer.
    tokio::select! {
        begun = Session::begin(&mut connection) => panic!("the peer answered a held Begin: {begun:?}"),
        arrived = first_begin => arrived.unwrap(),
    }
    answer_first.notify_one();
    // The answer to the cancelled begin reaches the client before the next Begin's answer
    // (one connection, in order); the connection takes the next session all the same.
    let mut session =
        tokio::time::timeout(Duration::from_secs(10), Session::begin(&mut connection))
            .await
            .expect("the peer answers the second Begin")
            .expect("the connection still takes sessions");
    session.end().await.unwrap();
    connection.close().await.unwrap();
    server.await.unwrap();
}
