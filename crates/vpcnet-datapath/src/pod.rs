//! Pod side (filled below).
