mod aimock;
mod anthropic;
mod openai;
mod runtime;
mod server;
