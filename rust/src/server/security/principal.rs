//! Who a connection is, as Kafka's `KafkaPrincipal` names it: `User:ANONYMOUS` until the
//! connection authenticates; `User:<name>` after SASL/SCRAM as the data directory's user NAME;
//! `User:<subject DN>` from a client certificate on a TLS listener that requires one (Kafka's
//! `DefaultKafkaPrincipalBuilder`, `ssl.principal.mapping.rules=DEFAULT`: the subject in RFC 2253
//! form, `tls::subject_dn`). SASL wins over the certificate on a SASL_SSL listener, as in Kafka.
//! One connection's principal lives in its SASL session (`sasl::Session::principal`).

use std::fmt;

/// Kafka's principal of a connection nobody authenticated (PLAINTEXT, or SSL without client
/// certificates).
const ANONYMOUS: &str = "ANONYMOUS";

/// A connection's principal; always of Kafka's type `User`. Displayed as Kafka writes it in ACLs
/// and logs: `User:<name>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Principal {
    name: String,
}

impl Principal {
    pub(crate) fn anonymous() -> Principal {
        Principal { name: ANONYMOUS.to_string() }
    }

    pub(crate) fn user(name: impl Into<String>) -> Principal {
        Principal { name: name.into() }
    }

    pub(crate) fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.name)
    }
}
