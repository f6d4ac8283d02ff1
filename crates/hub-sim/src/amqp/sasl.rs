//! SASL as the Event Hubs SDKs open it: they offer ANONYMOUS (or `MSSBCBS`, or PLAIN with the
//! policy name and key) and then authorize over CBS. Every mechanism is accepted here;
//! authorization is CBS's job ([`super::requests`]).

use fe2o3_amqp::acceptor::SaslAcceptor;
use fe2o3_amqp::acceptor::sasl_acceptor::SaslServerFrame;
use fe2o3_amqp::types::primitives::{Array, Symbol};
use fe2o3_amqp::types::sasl::{SaslCode, SaslInit, SaslOutcome, SaslResponse};

/// Accepts ANONYMOUS, PLAIN and MSSBCBS.
#[derive(Debug, Clone, Default)]
pub(crate) struct CbsSasl;

fn ok() -> SaslServerFrame {
    SaslServerFrame::Outcome(SaslOutcome {
        code: SaslCode::Ok,
        additional_data: None,
    })
}

impl SaslAcceptor for CbsSasl {
    fn mechanisms(&self) -> Array<Symbol> {
        Array::from(vec![
            Symbol::from("MSSBCBS"),
            Symbol::from("ANONYMOUS"),
            Symbol::from("PLAIN"),
        ])
    }

    fn on_init(&mut self, _init: SaslInit) -> SaslServerFrame {
        ok()
    }

    fn on_response(&mut self, _response: SaslResponse) -> SaslServerFrame {
        ok()
    }
}
