//! Integration tests: one binary (fast to link) driving agentry through its public
//! API, as a service embedding it would. Test modules live in `suite/`.

mod suite;
