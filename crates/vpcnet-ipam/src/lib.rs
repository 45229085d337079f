//! Pure IPAM core (issue 3). No I/O, no clock reads: time is passed in.
