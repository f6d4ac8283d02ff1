//! The device side: MQTT 3.1.1 over TLS, and over WebSockets (TLS) at `/$iothub/websocket`.
//! `listener` accepts connections and unwraps TLS and WebSocket framing, `session` serves
//! one device (or hands a registration to [`crate::dps`]), `https` serves the HTTPS port
//! (MQTT over WebSockets and the service REST API), [`connect`] decides who may connect and
//! [`topic`] reads IoT Hub's topics.

pub mod connect;
pub(crate) mod https;
pub(crate) mod listener;
pub(crate) mod session;
pub mod topic;
