//! Multi-process deployment (in progress).
