//! Node side of a pod (filled below).
