//! OpenTelemetry spans of a run, exported over OTLP/HTTP to a receiver in the test.
