//! sentinel's functional core: the records a state holds and the gates that
//! decide over them. Nothing here opens a file, reads a clock or starts a
//! process; every layer above may use it and it uses none of them.

pub mod address;
#[cfg(test)]
mod alloc_count;
pub mod escape;
pub mod gate;
pub mod llm;
pub mod redact;
pub mod state;
