pub mod authorizer;
pub mod credentials;
pub mod principal;
pub mod scram;
