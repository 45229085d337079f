//! ipBlock arithmetic.
