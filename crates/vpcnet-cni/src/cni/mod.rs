//! The CNI protocol: environment ([`args`]), network configuration ([`config`]), results
//! ([`result`]), errors ([`error`]) and spec versions ([`version`]).

pub mod args;
pub mod config;
pub mod error;
pub mod result;
pub mod version;
