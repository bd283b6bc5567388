//! Integration tests of the model adapters against real HTTP servers on 127.0.0.1.

mod suite;
